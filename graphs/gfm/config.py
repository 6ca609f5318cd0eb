"""GFM hyperparameters, saved as JSON next to each checkpoint."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from graphs.errors import CheckpointError


@dataclass
class GFMConfig:
    """Shape of the query-dependent GNN; the defaults are the small model that trains in minutes on CPU."""

    text_dim: int = 384
    """Size of the text embeddings (MiniLM: 384) for queries, nodes and relations."""
    hidden_dim: int = 64
    """Width of node states and relation vectors."""
    num_layers: int = 4
    """Message-passing layers (hops a signal can travel)."""
    relation_hidden: int = 64
    """Hidden width of the MLP that turns relation text into a relation vector (per layer)."""
    score_hidden: int = 64
    """Hidden width of the scoring MLP."""
    aggregation: str = "mean"
    """How messages into a node are combined: mean, sum or max."""
    dropout: float = 0.0
    """Dropout on layer updates during training."""
    init_text_weight: float = 10.0
    """Initial weight of the query–node cosine in the final score (the model starts as a dense retriever)."""
    name: str = "gfm-small"
    """Label of this configuration."""
    trained_questions: list[str] = field(default_factory=list)
    """Fingerprints of labeled questions used in training; evaluation leaves them out."""
    training: dict[str, Any] = field(default_factory=dict)
    """How the checkpoint was trained (data, steps, losses, timings)."""

    def to_json(self) -> str:
        """The config as indented JSON."""
        return json.dumps(asdict(self), indent=2)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> GFMConfig:
        """Build from a dict; unknown keys are an error."""
        known = {f.name for f in fields(cls)}
        unknown = set(data) - known
        if unknown:
            raise CheckpointError(f"unknown GFM config keys: {', '.join(sorted(unknown))}")
        return cls(**data)

    @classmethod
    def load(cls, path: str | Path) -> GFMConfig:
        """Read a config JSON file."""
        p = Path(path)
        try:
            data = json.loads(p.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise CheckpointError(f"GFM config not found: {p}") from None
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise CheckpointError(f"GFM config {p} is not valid JSON: {exc}") from None
        if not isinstance(data, dict):
            raise CheckpointError(f"GFM config {p} must be a JSON object")
        return cls.from_dict(data)


def small_config() -> GFMConfig:
    """The default size: about 0.2M parameters, a few minutes of CPU training on MuSiQue-100."""
    return GFMConfig()


def paper_config() -> GFMConfig:
    """A configuration with about 34M parameters, the size reported for G-reasoner's GFM."""
    return GFMConfig(
        hidden_dim=768, num_layers=7, relation_hidden=2048, score_hidden=2048, name="gfm-34m"
    )
