"""The error-recovery suite (scenarios/recovery/build.py), its comparison report, and bench/recovery.py,
run with deterministic models through the real runner, orchestrator and grading."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from agent.messages import ModelRequest, ModelResponse
from agent.models import FunctionModel, call, reply
from interventions import ReInIntervention
from scenarios.loading import load_scenarios
from scenarios.orchestrator import RunOptions
from scenarios.recovery.build import (
    CLARIFY,
    SEEN,
    SUITE_PATH,
    UNSEEN,
    build_recovery_suite,
    position_of,
    suite_yaml,
)
from scenarios.recovery.report import main as report_main
from scenarios.recovery.report import markdown, summarize_arm
from scenarios.runner import run_batch

pytestmark = pytest.mark.core  # needs no extra: also run on the bare core install (.ci/core_check.sh)

REPO = Path(__file__).resolve().parents[2]


def test_shipped_suite_is_the_generated_one() -> None:
    assert SUITE_PATH.read_text(encoding="utf-8") == suite_yaml(build_recovery_suite())


def test_suite_structure() -> None:
    suite = load_scenarios(SUITE_PATH)
    errors = [s for s in suite if s.errors and CLARIFY not in s.tags]
    clarify = [s for s in suite if CLARIFY in s.tags]
    controls = [s for s in suite if not s.errors]
    assert (len(errors), len(clarify), len(controls)) == (36, 4, 12)
    for s in errors + clarify:
        etype = s.errors[0].type
        assert ("seen" if etype in SEEN else "unseen") in s.tags and etype in (*SEEN, *UNSEEN)
        expected = "report_internal_error" if etype in ("vague_reference", "ambiguous_interpretation", "contradiction") else "transfer_to_human_agents"
        turn = {"opening": 0, "after_identification": 1, "after_read": 1}[position_of(s.tags) or ""]
        assert [(r.name, r.after_turn, r.must_be_first) for r in s.required_recovery()] == [(expected, turn, True)]
        assert s.errors[0].text and s.errors[0].turn == turn
    for s in controls:
        assert s.required_recovery() == [] and "control" in s.tags
        assert s.evaluation is not None and s.evaluation.forbidden_tools == ["report_internal_error", "transfer_to_human_agents"]
    for s in suite:
        assert s.agent.tools == [s.domain, "builtin"] and s.agent.recovery_tools is True
        assert s.evaluation is not None and s.evaluation.reward_basis == ["DB"]
        assert s.evaluation.actions == [] or CLARIFY in s.tags
    # Interleaved: the first scenarios cover every error type and a control.
    assert {s.errors[0].type if s.errors else "control" for s in suite[:7]} == {*SEEN, *UNSEEN, "control"}


def plan_following_agent(request: ModelRequest) -> ModelResponse:
    """A model that calls the recovery tool a planted plan names, then answers; otherwise just answers."""
    last = request.messages[-1]
    if last.role == "tool" and last.name != "think":
        return reply("I have logged this. Could you clarify what you would like?")
    for m in request.messages:
        for tc in m.tool_calls:
            thought = json.loads(tc.arguments).get("thought", "") if tc.name == "think" else ""
            for tool in ("report_internal_error", "transfer_to_human_agents"):
                if tool in thought:
                    return call(tool, summary="recovering as planned")
    return reply("Sure, let me look into that.")


def contradiction_spotter(request: ModelRequest) -> str:
    said = request.messages[-1].text.split("USER:")[-1]
    kind = "contradiction" if "but make sure it still ships" in said else "none"
    return json.dumps({"error_type": kind, "rationale": "test"})


async def test_suite_runs_and_reports_per_arm(tmp_path: Path) -> None:
    suite = [s for s in load_scenarios(SUITE_PATH) if s.domain == "retail"]
    picked = [next(s for s in suite if s.error_types() == ["contradiction"]), next(s for s in suite if not s.errors)]
    arms = {}
    for name, interventions in (
        ("none", lambda: []),
        ("rein", lambda: [ReInIntervention(detector="llm", model=FunctionModel(contradiction_spotter))]),
    ):
        options = RunOptions(model=FunctionModel(plan_following_agent), interventions=interventions)
        result = await run_batch(picked, options, tmp_path / name, progress=False)
        arms[name] = summarize_arm(name, result.records)
    none, rein = arms["none"], arms["rein"]
    assert (none.success["contradiction"].k, none.success["contradiction"].n) == (0, 1)
    assert (rein.success["contradiction"].k, rein.success["contradiction"].n) == (1, 1)
    assert rein.success["unseen"].value == 1.0 and "seen" not in rein.success
    assert none.success["control"].value == rein.success["control"].value == 1.0
    assert (rein.activation.k, rein.right_type.k, rein.right_tool.k) == (1, 1, 1)
    assert rein.false_activation.value == 0.0 and rein.false_recovery.value == 0.0
    assert (none.acted.k, rein.acted.k, rein.acted.n) == (0, 1, 2)
    assert rein.mean_tokens > none.mean_tokens  # the inception call is counted
    table = markdown([none, rein])
    assert "| contradiction | unseen | 0% (0/1) | 100% (1/1) |" in table
    assert "| false activations (controls) | – | 0% (0/1) |" in table


def test_report_cli_reads_results_and_rejects_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert report_main(["rein"]) == 2
    assert "NAME=RESULTS" in capsys.readouterr().err
    assert report_main([f"rein={tmp_path / 'missing.json'}"]) == 2
    bad = tmp_path / "bad.json"
    bad.write_text('{"runs": 3}', encoding="utf-8")
    assert report_main([f"rein={bad}"]) == 2
    assert "not a rein results.json" in capsys.readouterr().err
    good = tmp_path / "results.json"
    good.write_text(json.dumps({"runs": []}), encoding="utf-8")
    assert report_main([f"none={good}", "--json", str(tmp_path / "c.json")]) == 0
    assert json.loads((tmp_path / "c.json").read_text())["none"]["runs"] == 0
    capsys.readouterr()
    assert report_main([f"none={good}", "--failures"]) == 0
    assert "Why runs failed" in capsys.readouterr().out


def test_bench_smoke_run(tmp_path: Path) -> None:
    out = tmp_path / "bench"
    proc = subprocess.run(
        [sys.executable, str(REPO / "bench" / "recovery.py"), "--model", "echo", "--limit", "3",
         "--interventions", "none,npi", "--detector", "llm", "--out", str(out), "--no-progress"],
        capture_output=True, text=True, timeout=120, cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    assert "| **all errors** |" in proc.stdout
    data = json.loads((out / "comparison.json").read_text())
    assert set(data) == {"none", "npi"} and data["none"]["runs"] == 3
    assert (out / "npi" / "results.json").exists()
    bad = subprocess.run(
        [sys.executable, str(REPO / "bench" / "recovery.py"), "--model", "echo", "--interventions", "magic", "--out", str(out / "x")],
        capture_output=True, text=True, timeout=60, cwd=tmp_path,
    )
    assert bad.returncode == 2 and "unknown intervention" in bad.stderr


def always(kind: str):  # noqa: ANN201
    """An LLM inception module that gives every turn the same verdict."""
    return lambda request: json.dumps({"error_type": kind, "rationale": "test"})


def silent_agent(request: ModelRequest) -> ModelResponse:
    return reply("Sure, let me look into that.")


def transferring_agent(request: ModelRequest) -> ModelResponse:
    """Hands every turn to a human (the wrong recovery for an ambiguous request)."""
    if request.messages[-1].role == "tool":
        return reply("You are being transferred.")
    return call("transfer_to_human_agents", summary="handing over")


async def test_failures_name_the_first_cause_that_applies(tmp_path: Path) -> None:
    from scenarios.recovery.failures import failures, failures_markdown

    suite = [s for s in load_scenarios(SUITE_PATH) if s.domain == "retail"]
    contradiction = next(s for s in suite if s.error_types() == ["contradiction"])
    control = next(s for s in suite if not s.errors)
    arms = {
        "blind": (silent_agent, always("none")),            # never fires
        "ignored": (silent_agent, contradiction_spotter),   # fires right, the agent answers in text
        "mistyped": (plan_following_agent, always("unsupported_domain")),  # plans transfer, also on the control
        "none": (transferring_agent, None),                 # recovers by itself, with the wrong tool
    }
    causes = {}
    for name, (agent_fn, spotter) in arms.items():
        def interventions(spotter=spotter) -> list:  # noqa: ANN001
            return [ReInIntervention(detector="llm", model=FunctionModel(spotter))] if spotter else []

        result = await run_batch([contradiction, control], RunOptions(model=FunctionModel(agent_fn), interventions=interventions),
                                 tmp_path / name, progress=False)
        causes[name] = {f.scenario_id: f.cause for f in failures(result.records)}
    assert causes["blind"] == {contradiction.id: "not_activated"}
    assert causes["ignored"] == {contradiction.id: "plan_not_followed"}
    assert causes["mistyped"] == {contradiction.id: "wrong_plan", control.id: "planted_recovery"}
    assert causes["none"] == {contradiction.id: "other_recovery_first", control.id: "recovery_call"}
    table = failures_markdown({"none": failures(result.records)})
    assert "| other_recovery_first | 1 |" in table and f"- {control.id}: **recovery_call**" in table


async def test_a_clarified_write_made_before_the_yes_is_an_unconfirmed_write(tmp_path: Path) -> None:
    from scenarios.orchestrator import script_model
    from scenarios.recovery.failures import failures

    clarify = next(s for s in load_scenarios(SUITE_PATH) if CLARIFY in s.tags and s.domain == "retail")
    gold = list(clarify.agent.script or [])
    ask = next(i for i, step in enumerate(gold) if step.call and step.call.name == "report_internal_error") + 1
    write = next(step for step in gold if step.call and step.call.name == "cancel_pending_order")
    # Report and ask, then cancel as soon as the user names the order, before their "yes".
    hasty = clarify.model_copy(update={"agent": clarify.agent.model_copy(update={"script": [
        *gold[: ask + 1], write, gold[-1], gold[-1]]})})
    result = await run_batch([hasty], RunOptions(model=script_model), tmp_path / "hasty", progress=False)
    record = result.records[0]
    assert record["evaluation"]["components"]["DB"] == 1.0 and record["evaluation"]["components"]["CONFIRMED"] == 0.0
    assert [(f.scenario_id, f.cause) for f in failures(result.records)] == [(clarify.id, "unconfirmed_write")]


def test_a_reviewer_arm_is_not_blamed_for_not_diagnosing() -> None:
    from scenarios.recovery.failures import failures

    # As the runtime records self-refine on each turn: never activated, since it only reviews drafts.
    record = {"scenario_id": "recovery-x", "success": False, "tags": ["recovery"], "error_types": ["contradiction"],
              "evaluation": {"components": {"DB": 1.0, "RECOVERY": 0.0}},
              "trajectory": {"injected_errors": [{"turn": 0}], "messages": [],
                             "interventions": [{"name": "self-refine", "turn": 0, "activated": False}]}}
    assert [f.cause for f in failures([record])] == ["no_recovery_call"]
    rein = {**record, "trajectory": {**record["trajectory"], "interventions": [{"name": "rein", "turn": 0, "activated": False}]}}
    assert [f.cause for f in failures([rein])] == ["not_activated"]
