"""Scoring a detector on labeled turns: precision and recall per error type, false activations.

    python -m interventions.detector_eval      # the shipped detector on the test split of dialogues.jsonl
    python -m interventions.detector_eval --module llm --sample 60 --model local:qwen2.5-coder-0.5b
                                               # LLM inception beside the offline module, on a seeded sample

The command scores every user turn of the test dialogues (tasks and phrasings disjoint from
training and validation) and writes interventions/data/detector_metrics.json and a markdown table.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from interventions.error_map import NO_ERROR, SEEN

if TYPE_CHECKING:
    from agent.models.base import Model
    from interventions.dialogue_dataset import ContextTurn, LabeledDialogue
    from interventions.offline import OfflineDetector

DEFAULT_METRICS_PATH = Path(__file__).resolve().parent / "data" / "detector_metrics.json"
"""The shipped detector's test-split metrics (written by python -m interventions.detector_eval)."""


@dataclass
class LabelScore:
    """Precision and recall of one label."""

    label: str
    """The label."""
    support: int
    """Rows that have it."""
    predicted: int
    """Rows predicted as it."""
    correct: int
    """Rows that have it and were predicted as it."""

    @property
    def precision(self) -> float:
        """correct / predicted (0 when nothing was predicted)."""
        return self.correct / self.predicted if self.predicted else 0.0

    @property
    def recall(self) -> float:
        """correct / support (0 when there is no support)."""
        return self.correct / self.support if self.support else 0.0

    @property
    def f1(self) -> float:
        """Harmonic mean of precision and recall."""
        p, r = self.precision, self.recall
        return 2 * p * r / (p + r) if p + r else 0.0


@dataclass
class DetectorReport:
    """A detector's scores on a set of labeled turns."""

    rows: int
    """Rows scored."""
    per_label: dict[str, LabelScore] = field(default_factory=dict)
    """Scores per label, "none" included."""
    detection_precision: float = 0.0
    """Of the turns it flagged (any error type), the share that have an error."""
    detection_recall: float = 0.0
    """Of the turns with an error, the share it flagged."""
    false_activation_rate: float = 0.0
    """Of the error-free turns, the share it flagged."""
    category_accuracy: float = 0.0
    """Of the error turns it flagged, the share given the right category (so the right recovery tool)."""

    @property
    def macro_f1(self) -> float:
        """Mean F1 over the labels with support."""
        scored = [s.f1 for s in self.per_label.values() if s.support]
        return sum(scored) / len(scored) if scored else 0.0

    def as_dict(self) -> dict[str, object]:
        """Plain numbers, for JSON."""
        return {
            "rows": self.rows,
            "macro_f1": round(self.macro_f1, 4),
            "detection_precision": round(self.detection_precision, 4),
            "detection_recall": round(self.detection_recall, 4),
            "false_activation_rate": round(self.false_activation_rate, 4),
            "category_accuracy": round(self.category_accuracy, 4),
            "per_label": {
                k: {"support": s.support, "precision": round(s.precision, 4), "recall": round(s.recall, 4), "f1": round(s.f1, 4)}
                for k, s in self.per_label.items()
            },
        }

    def markdown(self) -> str:
        """The per-label table and the activation summary, as markdown."""
        lines = ["| label | support | precision | recall | F1 |", "|---|---:|---:|---:|---:|"]
        for k, s in self.per_label.items():
            lines.append(f"| {k} | {s.support} | {s.precision:.2f} | {s.recall:.2f} | {s.f1:.2f} |")
        lines += [
            "",
            f"Error detection (any type): precision {self.detection_precision:.2f}, recall {self.detection_recall:.2f}; "
            f"false activations on error-free turns {self.false_activation_rate:.1%}; right category (recovery tool) "
            f"for {self.category_accuracy:.1%} of flagged error turns; macro-F1 {self.macro_f1:.2f} over {self.rows} turns.",
        ]
        return "\n".join(lines)


def score(gold: Sequence[str], predicted: Sequence[str], labels: Sequence[str], category: dict[str, str]) -> DetectorReport:
    """Score predicted labels against gold labels; category maps each error type to its category."""
    if len(gold) != len(predicted):
        raise ValueError("gold and predicted differ in length")
    report = DetectorReport(rows=len(gold))
    for lab in [NO_ERROR, *[x for x in labels if x != NO_ERROR]]:
        report.per_label[lab] = LabelScore(
            lab,
            support=sum(g == lab for g in gold),
            predicted=sum(p == lab for p in predicted),
            correct=sum(g == lab and p == lab for g, p in zip(gold, predicted, strict=True)),
        )
    flagged = [(g, p) for g, p in zip(gold, predicted, strict=True) if p != NO_ERROR]
    errors = [g for g in gold if g != NO_ERROR]
    clean = len(gold) - len(errors)
    true_flags = [(g, p) for g, p in flagged if g != NO_ERROR]
    report.detection_precision = len(true_flags) / len(flagged) if flagged else 0.0
    report.detection_recall = len(true_flags) / len(errors) if errors else 0.0
    report.false_activation_rate = (len(flagged) - len(true_flags)) / clean if clean else 0.0
    right = sum(category.get(g) == category.get(p) for g, p in true_flags)
    report.category_accuracy = right / len(true_flags) if true_flags else 0.0
    return report


"""Error types the paper's ReIn prompt was designed with; the others (contradiction, unsupported
domain) are its unseen types (the same split as scenarios.recovery.build)."""


def _rate(k: int, n: int) -> str:
    return f"{k / n:.1%} ({k}/{n})" if n else "–"


def row_tools(rows: Sequence[ContextTurn], dialogues: Sequence[LabeledDialogue]) -> list[list[dict[str, Any]]]:
    """The agent's tools (the shipped domain_tools.json) at each row, by its dialogue's domain."""
    from interventions.dialogue_dataset import read_domain_tools

    tools = read_domain_tools()
    domain = {d.id: d.domain for d in dialogues}
    return [tools[domain[r.dialogue]] for r in rows]


def evaluate_dialogues(dialogues: list[LabeledDialogue], detector: OfflineDetector) -> dict[str, Any]:
    """Turn scores, activation at the error turn and false activations of a detector on dialogues."""
    from interventions.dialogue_dataset import context_turns
    from interventions.error_map import load_error_map

    rows = context_turns(dialogues)
    found = detector.classify_turns([r.text for r in rows], [r.history for r in rows], tools=row_tools(rows, dialogues))
    predicted = [d.error_type for d in found]
    emap = load_error_map()
    names = [NO_ERROR, *emap.labels]
    categories = {n: emap.category_of(n) for n in emap.labels}
    report = score([r.label for r in rows], predicted, names, categories)
    by_dialogue: dict[str, list[tuple[ContextTurn, str]]] = {}
    for r, p in zip(rows, predicted, strict=True):
        by_dialogue.setdefault(r.dialogue, []).append((r, p))
    at_error: dict[str, list[int]] = {}
    first_at_error: dict[str, list[int]] = {}
    controls = [0, 0]
    for d in dialogues:
        turns = by_dialogue[d.id]
        if d.is_control:
            controls[0] += any(p != NO_ERROR for _, p in turns)
            controls[1] += 1
            continue
        target_fired = turns[-1][1] != NO_ERROR
        early = any(p != NO_ERROR for _, p in turns[:-1])
        group = "seen" if d.label in SEEN else "unseen"
        for key in (d.position, group, d.label, "all"):
            at_error.setdefault(key, []).append(int(target_fired))
            first_at_error.setdefault(key, []).append(int(target_fired and not early))
    clean_kinds: dict[str, list[int]] = {}
    for r, p in zip(rows, predicted, strict=True):
        if r.label == NO_ERROR:
            clean_kinds.setdefault(r.kind, []).append(int(p != NO_ERROR))
    split_scores = {}
    for group, types in (("seen", SEEN), ("unseen", tuple(t for t in emap.labels if t not in SEEN))):
        idx = [i for i, r in enumerate(rows) if r.label in types]
        caught = sum(predicted[i] != NO_ERROR for i in idx)
        flagged_as = [i for i, p in enumerate(predicted) if p in types]
        split_scores[group] = {
            "turns": len(idx), "detected": caught, "right_type": sum(predicted[i] == rows[i].label for i in idx),
            "type_precision": round(sum(rows[i].label == predicted[i] for i in flagged_as) / len(flagged_as), 4) if flagged_as else 0.0,
        }
    return {
        "threshold": detector.threshold,
        "turns": report.as_dict(),
        "seen_unseen": split_scores,
        "activation_at_error_turn": {k: [sum(v), len(v)] for k, v in at_error.items()},
        "first_activation_at_error_turn": {k: [sum(v), len(v)] for k, v in first_at_error.items()},
        "false_activations_by_kind": {k: [sum(v), len(v)] for k, v in sorted(clean_kinds.items())},
        "control_dialogues_with_activation": controls,
        "markdown": _markdown(report, split_scores, at_error, first_at_error, clean_kinds, controls, detector.threshold),
    }


def _markdown(report: DetectorReport, split_scores: dict[str, dict[str, Any]], at_error: dict[str, list[int]],
              first: dict[str, list[int]], kinds: dict[str, list[int]], controls: list[int], threshold: float) -> str:
    lines = [f"Threshold {threshold:g}.", "", report.markdown(), "",
             "| error types | turns | detected (any type) | right type | type precision |", "|---|---:|---:|---:|---:|"]
    for group, s in split_scores.items():
        lines.append(f"| {group} | {s['turns']} | {_rate(s['detected'], s['turns'])} | {_rate(s['right_type'], s['turns'])} | {s['type_precision']:.2f} |")
    lines += ["", "| error dialogues | activated at the error turn | first activation at the error turn |", "|---|---:|---:|"]
    order = ["opening", "after_identification", "after_read", "after_clarify", "seen", "unseen", "all"]
    for key in order:
        if key in at_error:
            lines.append(f"| {key} | {_rate(sum(at_error[key]), len(at_error[key]))} | {_rate(sum(first[key]), len(first[key]))} |")
    lines += ["", "| error-free turns | false activations |", "|---|---:|"]
    for kind, v in sorted(kinds.items()):
        lines.append(f"| {kind} | {_rate(sum(v), len(v))} |")
    lines += ["", f"Control dialogues (no error in any turn) with an activation: {_rate(controls[0], controls[1])}."]
    return "\n".join(lines)


def sample_rows(dialogues: list[LabeledDialogue], n: int, seed: int = 0) -> list[ContextTurn]:
    """A seeded sample of user turns: n error turns (the targets of error dialogues, dealt round-robin
    over (error type, position) cells) and n error-free turns (round-robin over turn kinds)."""
    import random

    from interventions.dialogue_dataset import context_turns

    rng = random.Random(seed)
    rows = context_turns(dialogues)
    errors: dict[tuple[str, str], list[ContextTurn]] = {}
    clean: dict[tuple[str, str], list[ContextTurn]] = {}
    for r in rows:
        if r.label != NO_ERROR:
            errors.setdefault((r.label, r.position), []).append(r)
        else:
            clean.setdefault((r.kind, ""), []).append(r)

    def deal(cells: dict[tuple[str, str], list[ContextTurn]], k: int) -> list[ContextTurn]:
        pools = [cells[key][:] for key in sorted(cells)]
        for pool in pools:
            rng.shuffle(pool)
        rng.shuffle(pools)
        out: list[ContextTurn] = []
        while len(out) < k and any(pools):
            for pool in pools:
                if pool and len(out) < k:
                    out.append(pool.pop())
        return out

    return deal(errors, n) + deal(clean, n)


def llm_predictions(rows: Sequence[ContextTurn], domains: dict[str, str], model: str | Model, progress: bool = True) -> list[dict[str, Any]]:
    """The LLM inception module's verdict on each row, with its dialogue's domain tools (the agent's) in the prompt."""
    import asyncio
    import sys
    import time

    from agent.ledger import CostLedger
    from agent.messages import Message
    from agent.models import resolve_model
    from agent.plugin_api import InterventionContext
    from interventions.error_map import load_error_map
    from interventions.llm_inception import LLMDetector
    from tools.registry import load_toolkit

    emap = load_error_map()
    detector = LLMDetector(emap, resolve_model(model))
    # The detector runs outside an agent here, so it always has its own model (never ctx.model).
    llm = detector.model_for(None)
    schemas = {d: load_toolkit(d).schemas() for d in sorted(set(domains.values()))}
    out = []
    for i, r in enumerate(rows):
        dialogue = [Message.model_validate({"role": role, "content": text}) for role, text in (*r.history, ("user", r.text))]
        ledger = CostLedger()
        ctx = InterventionContext(dialogue=dialogue, tools=schemas[domains[r.dialogue]], turn=r.index,
                                  model=llm, ledger=ledger)
        start = time.perf_counter()
        found = asyncio.run(detector.detect(ctx, emap.labels))
        seconds = time.perf_counter() - start
        out.append({"dialogue": r.dialogue, "index": r.index, "gold": r.label, "predicted": found.error_type,
                    "seconds": round(seconds, 2), "rationale": found.rationale[:200]})
        if progress:
            print(f"[{i + 1}/{len(rows)}] gold={r.label} llm={found.error_type} {seconds:.1f}s", file=sys.stderr, flush=True)
    return out


def compare_on_sample(rows: Sequence[ContextTurn], columns: dict[str, list[str]]) -> str:
    """Detection precision, recall and false activations of each module's predictions on the same rows."""
    from interventions.error_map import load_error_map

    emap = load_error_map()
    names = [NO_ERROR, *emap.labels]
    categories = {n: emap.category_of(n) for n in emap.labels}
    gold = [r.label for r in rows]
    n_err = sum(g != NO_ERROR for g in gold)
    lines = [f"Sample: {n_err} error turns, {len(gold) - n_err} error-free turns.", "",
             "| module | detection precision | detection recall | right type | false activations | macro-F1 |",
             "|---|---:|---:|---:|---:|---:|"]
    for module, predicted in columns.items():
        rep = score(gold, predicted, names, categories)
        right = sum(g == p for g, p in zip(gold, predicted, strict=True) if g != NO_ERROR)
        lines.append(f"| {module} | {rep.detection_precision:.2f} | {rep.detection_recall:.2f} | {_rate(right, n_err)} | "
                     f"{rep.false_activation_rate:.1%} | {rep.macro_f1:.2f} |")
    positions = sorted({r.position for r in rows if r.label != NO_ERROR})
    lines += ["", "| error turns: detected (any type) | " + " | ".join(columns) + " |", "|---|" + "---:|" * len(columns)]
    for key in [*positions, *sorted({g for g in gold if g != NO_ERROR})]:
        idx = [i for i, r in enumerate(rows) if r.label != NO_ERROR and key in (r.position, r.label)]
        cells = [_rate(sum(p[i] != NO_ERROR for i in idx), len(idx)) for p in columns.values()]
        lines.append(f"| {key} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    import argparse
    import json
    import sys

    from agent.errors import UserFacingError
    from interventions.dialogue_dataset import DIALOGUES_PATH, read_dialogues
    from interventions.offline import OfflineDetector

    parser = argparse.ArgumentParser(prog="python -m interventions.detector_eval", description="Score the offline detector on the test dialogues.")
    parser.add_argument("--dataset", type=Path, default=DIALOGUES_PATH, help="labeled dialogues JSONL")
    parser.add_argument("--detector", type=Path, default=None, help="classifier .npz (default: the shipped one)")
    parser.add_argument("--split", default="test", choices=["train", "validation", "test"])
    parser.add_argument("--threshold", type=float, default=None, help="error probability needed to activate (default: the stored one)")
    parser.add_argument("--metrics", type=Path, default=None, help="write metrics JSON here (default for the test split: interventions/data/detector_metrics.json)")
    parser.add_argument("--module", default="offline", choices=["offline", "llm"],
                        help="llm: compare the LLM inception module with the offline one on a seeded sample")
    parser.add_argument("--sample", type=int, default=0, help="score N error turns and N error-free turns (seeded) instead of every turn")
    parser.add_argument("--seed", type=int, default=0, help="seed of the sample")
    parser.add_argument("--model", default="local:qwen2.5-coder-0.5b", help="the LLM inception module's model")
    parser.add_argument("--llm-results", type=Path, default=None,
                        help="with --module llm: reuse the verdicts of an earlier run's --metrics file (same sample) instead of calling the model")
    args = parser.parse_args(argv)
    try:
        dialogues = [d for d in read_dialogues(args.dataset) if d.split == args.split]
        if not dialogues:
            raise UserFacingError(f"{args.dataset} has no {args.split} dialogues")
        if args.sample or args.module == "llm":
            return _sample_main(args, dialogues)
        result = evaluate_dialogues(dialogues, OfflineDetector(args.detector, threshold=args.threshold))
    except UserFacingError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(result["markdown"])
    metrics = args.metrics or (DEFAULT_METRICS_PATH if args.split == "test" and args.dataset == DIALOGUES_PATH else None)
    if metrics is not None:
        body = {k: v for k, v in result.items() if k != "markdown"} | {"split": args.split, "dialogues": len(dialogues)}
        metrics.write_text(json.dumps(body, indent=1) + "\n")
    return 0


def _sample_main(args: Any, dialogues: list[LabeledDialogue]) -> int:
    import json

    from agent.errors import UserFacingError
    from interventions.offline import OfflineDetector

    rows = sample_rows(dialogues, args.sample or 60, args.seed)
    offline = OfflineDetector(args.detector, threshold=args.threshold)
    columns = {f"offline (threshold {offline.threshold:g})": [
        d.error_type for d in offline.classify_turns([r.text for r in rows], [r.history for r in rows],
                                                     tools=row_tools(rows, dialogues))]}
    body: dict[str, Any] = {"split": args.split, "seed": args.seed, "sample": len(rows)}
    if args.module == "llm":
        if args.llm_results is not None:
            earlier = json.loads(args.llm_results.read_text())
            found = earlier["llm"]
            if [(f["dialogue"], f["index"]) for f in found] != [(r.dialogue, r.index) for r in rows]:
                raise UserFacingError(f"{args.llm_results} holds a different sample (check --sample and --seed)")
            args.model = earlier["model"]
        else:
            found = llm_predictions(rows, {d.id: d.domain for d in dialogues}, args.model)
        columns[f"llm ({args.model})"] = [f["predicted"] for f in found]
        seconds = sorted(f["seconds"] for f in found)
        body |= {"model": args.model, "llm": found, "llm_seconds_p50": seconds[len(seconds) // 2],
                 "llm_seconds_total": round(sum(seconds), 1)}
    body["markdown"] = compare_on_sample(rows, columns)
    print(body["markdown"])
    if args.module == "llm":
        print(f"\nLLM seconds per turn: p50 {body['llm_seconds_p50']}, total {body['llm_seconds_total']}.")
    if args.metrics is not None:
        args.metrics.write_text(json.dumps(body, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
