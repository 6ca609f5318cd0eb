"""Router evaluation: labelled query files, accuracy overall and per mode, confusion matrix."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agent.errors import UserFacingError
from agent.jsonl import json_objects
from agent.plugin_api import MODES


@dataclass(frozen=True)
class LabeledQuery:
    """One line of a routing file."""

    query: str
    """The text a router sees."""
    mode: str
    """The gold mode."""
    extra: dict[str, Any] = field(default_factory=dict)
    """The line's other fields (id, source, answer, style…)."""


def load_labeled(path: str | Path) -> list[LabeledQuery]:
    """Read a JSONL file whose lines have `query` and `mode`; bad lines are reported by number."""
    path = Path(path)
    if not path.is_file():
        raise UserFacingError(f"no such data file: {path}")
    rows: list[LabeledQuery] = []
    for number, item in json_objects(path):
        query, mode = item.get("query"), item.get("mode")
        if not isinstance(query, str) or not query.strip():
            raise UserFacingError(f"{path}:{number}: missing or empty 'query'")
        if mode not in MODES:
            raise UserFacingError(f"{path}:{number}: 'mode' must be one of {', '.join(MODES)}, got {mode!r}")
        rows.append(LabeledQuery(query, mode, {k: v for k, v in item.items() if k not in ("query", "mode")}))
    if not rows:
        raise UserFacingError(f"{path} holds no labelled queries")
    return rows


@dataclass
class RouterReport:
    """How a router's choices compare with the gold modes."""

    n: int
    """Number of queries."""
    accuracy: float
    """Share routed to their gold mode."""
    per_mode: dict[str, dict[str, float]]
    """For each gold mode: n, accuracy (recall), precision."""
    confusion: dict[str, dict[str, int]]
    """confusion[gold][predicted] = count."""

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {"n": self.n, "accuracy": self.accuracy, "per_mode": self.per_mode, "confusion": self.confusion}


def score_routes(gold: Sequence[str], predicted: Sequence[str]) -> RouterReport:
    """Accuracy, per-mode recall and precision, and the confusion matrix."""
    if len(gold) != len(predicted):
        raise ValueError(f"{len(gold)} gold modes but {len(predicted)} predictions")
    confusion: dict[str, dict[str, int]] = {g: {p: 0 for p in MODES} for g in MODES}
    for g, p in zip(gold, predicted, strict=True):
        confusion[g][p] += 1
    per_mode: dict[str, dict[str, float]] = {}
    for m in MODES:
        n_gold = sum(confusion[m].values())
        n_pred = sum(confusion[g][m] for g in MODES)
        per_mode[m] = {
            "n": n_gold,
            "accuracy": round(confusion[m][m] / n_gold, 4) if n_gold else 0.0,
            "precision": round(confusion[m][m] / n_pred, 4) if n_pred else 0.0,
        }
    correct = sum(confusion[m][m] for m in MODES)
    return RouterReport(
        n=len(gold),
        accuracy=round(correct / len(gold), 4) if gold else 0.0,
        per_mode=per_mode,
        confusion=confusion,
    )


def format_report(report: RouterReport) -> str:
    """A plain-text table of a report."""
    lines = [f"accuracy {report.accuracy:.3f} on {report.n} queries", "", "mode        n   accuracy  precision"]
    for m in MODES:
        r = report.per_mode[m]
        lines.append(f"{m:<10} {int(r['n']):>3}   {r['accuracy']:.3f}     {r['precision']:.3f}")
    lines += ["", "confusion (rows: gold, columns: routed)", " " * 11 + "".join(f"{m:>10}" for m in MODES)]
    for g in MODES:
        lines.append(f"{g:<11}" + "".join(f"{report.confusion[g][p]:>10}" for p in MODES))
    return "\n".join(lines)


__all__ = ["LabeledQuery", "RouterReport", "format_report", "load_labeled", "score_routes"]
