"""What the agent is shown after each step: a picture, and a text rendering for text-only models."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from agent.extras import needs_extra

with needs_extra("jigsaw", "the jigsaw environment"):
    import numpy as np

from scenarios.jigsaw.render import image_part, to_png


@dataclass
class Observation:
    """One observation: feedback on the last action, the state, the picture and optional edge hints."""

    grid: int
    """Grid size n (n×n pieces)."""
    state: list[int]
    """Piece label at each position, row by row (labels are shuffled ids, not answers)."""
    image: np.ndarray = field(repr=False)
    """The picture produced by the last step (RGB), or the current arrangement."""
    turn: int
    """Turns used so far."""
    max_turns: int
    """Turn limit of the episode."""
    feedback: str = ""
    """What the last action did: output, errors, swaps applied."""
    hints: str = ""
    """Edge-compatibility hints in text, when the environment gives them."""
    done: bool = False
    """Whether the episode has ended."""

    def text(self) -> str:
        """The text rendering: feedback, the state as a grid of labels, and the hints."""
        n = self.grid
        rows = ["  [" + ", ".join(f"{v:>2}" for v in self.state[r * n:(r + 1) * n]) + " ]" for r in range(n)]
        parts = []
        if self.feedback:
            parts.append(self.feedback)
        parts.append(
            f"Turn {self.turn}/{self.max_turns}. Grid {n}x{n}; positions are numbered row by row from 0 "
            f"(top left) to {n * n - 1} (bottom right).\nstate (piece label at each position):\n"
            + "\n".join(rows)
        )
        if self.hints:
            parts.append(self.hints)
        return "\n\n".join(parts)

    def png(self) -> bytes:
        """The picture as PNG bytes."""
        return to_png(self.image)

    def content_parts(self, include_image: bool = True) -> list[dict[str, Any]]:
        """OpenAI content parts: the text, then the picture as a PNG data URL when include_image."""
        parts: list[dict[str, Any]] = [{"type": "text", "text": self.text()}]
        if include_image:
            parts.append(image_part(self.image))
        return parts


def edge_hints(state: list[int], grid: int, lr: np.ndarray, tb: np.ndarray, label_to_piece: dict[int, int]) -> str:
    """Seam scores of the current arrangement and each piece's best-fitting neighbours, by label.

    Scores are on a 0–1 scale where lower means the two edges continue each other better.
    """
    n = grid
    pieces = [label_to_piece[label] for label in state]
    seams = []
    for position in range(n * n):
        row, col = divmod(position, n)
        if col < n - 1:
            seams.append((float(lr[pieces[position], pieces[position + 1]]), f"{position}|{position + 1}"))
        if row < n - 1:
            seams.append((float(tb[pieces[position], pieces[position + n]]), f"{position}/{position + n}"))
    seams.sort(reverse=True)
    worst = ", ".join(f"{name} {score:.2f}" for score, name in seams[: max(3, n)])
    lines = [
        "Edge hints (0 = edges continue each other, 1 = they do not fit):",
        f"worst seams now (a|b = side by side, a/b = a above b): {worst}",
        "best neighbours per piece label (right of it, below it):",
    ]
    piece_to_label = {piece: label for label, piece in label_to_piece.items()}
    for label in sorted(label_to_piece):
        piece = label_to_piece[label]
        right = int(np.argmin(lr[piece]))
        below = int(np.argmin(tb[piece]))
        lines.append(
            f"  {label:>2}: right {piece_to_label[right]} ({lr[piece, right]:.2f}), "
            f"below {piece_to_label[below]} ({tb[piece, below]:.2f})"
        )
    return "\n".join(lines)
