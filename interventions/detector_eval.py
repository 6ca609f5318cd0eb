"""Scoring a detector on labeled turns: precision and recall per error type, false activations."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from interventions.error_map import NO_ERROR


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
