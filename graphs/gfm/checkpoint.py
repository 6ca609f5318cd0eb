"""GFM checkpoints: `NAME.pt` (a torch state_dict) next to `NAME.json` (its GFMConfig)."""

from __future__ import annotations

from pathlib import Path

from agent.extras import needs_extra

with needs_extra("graphs", "QuadGraph retrieval"):
    import torch

from graphs.errors import CheckpointError
from graphs.gfm.config import GFMConfig
from graphs.gfm.model import GFM

SHIPPED = Path(__file__).resolve().parent.parent / "checkpoints" / "gfm-small.pt"
"""The pretrained small checkpoint that ships with rein."""


def config_path(path: str | Path) -> Path:
    """The config JSON that belongs to a checkpoint file."""
    return Path(path).with_suffix(".json")


def save_checkpoint(model: GFM, path: str | Path) -> Path:
    """Write the weights and the config; returns the weights path."""
    p = Path(path)
    if p.suffix != ".pt":
        raise CheckpointError(f"checkpoint path must end in .pt, got {p}")
    p.parent.mkdir(parents=True, exist_ok=True)
    torch.save(model.state_dict(), p)
    config_path(p).write_text(model.config.to_json(), encoding="utf-8")
    return p


def load_checkpoint(path: str | Path | None = None) -> GFM:
    """Read a checkpoint (default: the shipped one); problems raise CheckpointError."""
    p = Path(path) if path is not None else SHIPPED
    if not p.is_file():
        raise CheckpointError(f"GFM checkpoint not found: {p}")
    config = GFMConfig.load(config_path(p))
    model = GFM(config)
    try:
        state = torch.load(p, map_location="cpu", weights_only=True)
    except Exception as exc:  # torch raises several types for truncated or foreign files
        raise CheckpointError(f"GFM checkpoint {p} is unreadable ({type(exc).__name__}: {exc})") from None
    if not isinstance(state, dict):
        raise CheckpointError(f"GFM checkpoint {p} does not hold a state_dict")
    try:
        model.load_state_dict(state)
    except RuntimeError as exc:
        raise CheckpointError(f"GFM checkpoint {p} does not match its config: {exc}") from None
    model.eval()
    return model
