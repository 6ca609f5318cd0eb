"""The shipped routing task set: size, kinds, styles, splits by source item, graders and DB truth."""

from __future__ import annotations

from collections import Counter, defaultdict
from pathlib import Path

from scenarios.domains import load_domain
from scenarios.routing_tasks import TASKS_PATH, grade, load_tasks
from scenarios.routing_tasks.build import STYLES, split_of
from scenarios.routing_tasks.labeling import task_tools

TASKS = load_tasks()


def test_set_is_large_and_covers_every_kind_in_every_split() -> None:
    assert len(TASKS) >= 600
    assert len({t.id for t in TASKS}) == len(TASKS)
    by = Counter((t.kind, t.split) for t in TASKS)
    for kind in ("instant", "reasoning", "tool"):
        for split in ("train", "validation", "test"):
            assert by[(kind, split)] >= 30, (kind, split, by[(kind, split)])


def test_every_kind_is_written_in_every_style() -> None:
    styles: dict[str, set[str]] = defaultdict(set)
    for t in TASKS:
        styles[t.kind].add(t.style)
    assert all(s == set(STYLES) for s in styles.values()), styles


def test_splits_are_disjoint_by_source_item() -> None:
    seen: dict[str, str] = {}
    for t in TASKS:
        assert seen.setdefault(t.source_item, t.split) == t.split, t.source_item
        assert split_of(t.source_item) == t.split
    # musique questions sharing a sub-question were merged into one item
    musique_items = Counter(t.source_item for t in TASKS if t.family == "musique")
    assert len(musique_items) < sum(musique_items.values())


def test_every_task_passes_its_own_gold_answer_and_fails_a_wrong_one() -> None:
    for t in TASKS:
        assert grade(t, t.grader.answer), t.id
        assert not grade(t, "I am not sure."), t.id


def test_tau2_answers_match_the_database_through_the_read_tools() -> None:
    retail, airline = load_domain("retail"), load_domain("airline")
    checked = 0
    for t in TASKS:
        if t.family == "tau2-retail":
            order = retail.call("get_order_details", order_id=t.source_item.split(":")[-1])
            text = str(order)
        elif t.family == "tau2-airline":
            res = airline.call("get_reservation_details", reservation_id=t.source_item.split(":")[-1])
            text = str(res)
        else:
            continue
        if t.grader.type == "text":
            assert t.grader.answer in text, t.id
        checked += 1
    assert checked >= 80


def test_tool_tasks_get_only_read_tools() -> None:
    retail_task = next(t for t in TASKS if t.family == "tau2-retail")
    names = {tool.name for tool in task_tools(retail_task) or []}
    assert "get_order_details" in names
    assert not names & {"cancel_pending_order", "transfer_to_human_agents", "return_delivered_order_items"}
    musique = next(t for t in TASKS if t.family == "musique")
    assert task_tools(musique) is None  # no graph given: the labeller skips it


def test_licence_and_provenance_are_recorded() -> None:
    licences = {t.source: t.licence for t in TASKS}
    assert licences["opentriviaqa"] == "CC BY-SA 4.0" and licences["musique-100"] == "CC BY 4.0"
    assert all(t.source_id for t in TASKS)
    readme = (Path(TASKS_PATH).parent / "README.md").read_text()
    assert "CC BY-SA 4.0" in readme and "python -m scenarios.routing_tasks.build" in readme
