"""A small numpy classifier over sentence embeddings: softmax regression or a one-hidden-layer MLP.

Trained full-batch with Adam and class-balanced weights (agent.softmax.fit_adam, the trainer the
offline router shares); saved as a few arrays in an .npz file (no pickles), so the offline
detector needs nothing beyond numpy at run time.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from agent.errors import UserFacingError
from agent.softmax import Layer, fit_adam, forward, softmax

FORMAT = "rein-turn-classifier/1"
TWO_STAGE_FORMAT = "rein-two-stage-classifier/1"


@contextlib.contextmanager
def reading_arrays(path: str | Path, fmt: str, kind: str, short: str) -> Iterator[Any]:
    """The arrays of an .npz written by write_arrays in format fmt; a clear error for a missing or
    foreign file, and for a bad entry read inside the block ("not a rein KIND", "cannot read SHORT")."""
    try:
        with np.load(Path(path), allow_pickle=False) as data:
            if "format" not in data or str(data["format"]) != fmt:
                raise UserFacingError(f"{path}: not a rein {kind} ({fmt})")
            yield data
    except (OSError, ValueError, KeyError, json.JSONDecodeError) as exc:
        raise UserFacingError(f"cannot read {short} {path}: {exc}") from None


def write_arrays(path: str | Path, arrays: dict[str, np.ndarray]) -> None:
    """Write named arrays as a compressed .npz (no pickles), the format of the detector files."""
    named: dict[str, Any] = arrays  # numpy's stub would read a key as its allow_pickle flag
    with Path(path).open("wb") as f:
        np.savez_compressed(f, **named)


def feature_rows(x: np.ndarray, width: int) -> np.ndarray:
    """`x` as float32 rows of `width` features; a ValueError for any other shape."""
    x = np.asarray(x, dtype=np.float32)
    if x.ndim != 2 or x.shape[1] != width:
        raise ValueError(f"expected feature rows of width {width}, got shape {x.shape}")
    return x


@dataclass
class TurnClassifier:
    """Label probabilities for feature rows: softmax(relu(X W1 + b1) W2 + b2), or softmax(X W + b)."""

    labels: list[str]
    """Class names, in column order."""
    layers: list[Layer]
    """(weights, bias) per layer; ReLU between layers."""
    meta: dict[str, Any] = field(default_factory=dict)
    """How it was trained (features, data, hyperparameters, held-out metrics)."""

    @property
    def input_dim(self) -> int:
        """Width of a feature row."""
        return int(self.layers[0][0].shape[0])

    def predict_proba(self, x: np.ndarray) -> np.ndarray:
        """Probabilities, one row per input row, one column per label."""
        x = feature_rows(x, self.input_dim)
        return softmax(forward(self.layers, x)[-1])

    def save(self, path: str | Path) -> None:
        """Write the classifier as an .npz of plain arrays."""
        arrays: dict[str, np.ndarray] = {
            "format": np.array(FORMAT),
            "labels": np.array(self.labels),
            "meta": np.array(json.dumps(self.meta, sort_keys=True)),
        }
        for i, (w, b) in enumerate(self.layers):
            arrays[f"w{i}"] = w.astype(np.float32)
            arrays[f"b{i}"] = b.astype(np.float32)
        write_arrays(path, arrays)

    @classmethod
    def load(cls, path: str | Path) -> TurnClassifier:
        """Read a classifier saved by save(); a clear error for anything else."""
        with reading_arrays(path, FORMAT, "turn classifier", "classifier") as data:
            labels = [str(s) for s in data["labels"]]
            meta = json.loads(str(data["meta"]))
            layers = []
            i = 0
            while f"w{i}" in data:
                layers.append((data[f"w{i}"].astype(np.float32), data[f"b{i}"].astype(np.float32)))
                i += 1
        if not layers or layers[-1][0].shape[1] != len(labels):
            raise UserFacingError(f"{path}: layer shapes do not match its {len(labels)} labels")
        for (w, b), (w2, _) in zip(layers, layers[1:], strict=False):
            if b.shape != (w.shape[1],) or w2.shape[0] != w.shape[1]:
                raise UserFacingError(f"{path}: inconsistent layer shapes")
        return cls(labels=labels, layers=layers, meta=meta)


def _layer_arrays(prefix: str, layers: list[Layer]) -> dict[str, np.ndarray]:
    out: dict[str, np.ndarray] = {}
    for i, (w, b) in enumerate(layers):
        out[f"{prefix}w{i}"] = w.astype(np.float32)
        out[f"{prefix}b{i}"] = b.astype(np.float32)
    return out


def _read_layers(data: Any, prefix: str, path: str | Path, width: int) -> list[Layer]:
    """The layers stored under prefix, checked to chain and to end in width columns."""
    layers = []
    i = 0
    while f"{prefix}w{i}" in data:
        layers.append((data[f"{prefix}w{i}"].astype(np.float32), data[f"{prefix}b{i}"].astype(np.float32)))
        i += 1
    if not layers or layers[-1][0].shape[1] != width:
        raise UserFacingError(f"{path}: layer shapes do not match its {width} outputs")
    for (w, b), (w2, _) in zip(layers, layers[1:], strict=False):
        if b.shape != (w.shape[1],) or w2.shape[0] != w.shape[1]:
            raise UserFacingError(f"{path}: inconsistent layer shapes")
    return layers


@dataclass
class TwoStageClassifier:
    """A gate (error or not) and a type head trained on error rows only; P(type) = P(error) * P(type | error).

    Its probabilities have the columns of a TurnClassifier ("none" first), so the offline detector's
    rule (summed error mass against the threshold, likeliest type) reads the gate alone for activation."""

    labels: list[str]
    """Class names, in column order; the first is "none"."""
    gate: list[Layer]
    """Layers of the binary head (columns: none, error)."""
    types: list[Layer]
    """Layers of the type head (columns: labels[1:])."""
    meta: dict[str, Any] = field(default_factory=dict)
    """How it was trained (features, data, hyperparameters, held-out metrics)."""

    @property
    def input_dim(self) -> int:
        """Width of a feature row."""
        return int(self.gate[0][0].shape[0])

    def predict_proba(self, x: np.ndarray) -> np.ndarray:
        """Probabilities, one row per input row, one column per label."""
        x = feature_rows(x, self.input_dim)
        gate = softmax(forward(self.gate, x)[-1])
        types = softmax(forward(self.types, x)[-1])
        return np.concatenate([gate[:, :1], gate[:, 1:2] * types], axis=1)

    def save(self, path: str | Path) -> None:
        """Write both heads as an .npz of plain arrays."""
        arrays: dict[str, np.ndarray] = {
            "format": np.array(TWO_STAGE_FORMAT),
            "labels": np.array(self.labels),
            "meta": np.array(json.dumps(self.meta, sort_keys=True)),
        }
        arrays |= _layer_arrays("gate_", self.gate) | _layer_arrays("type_", self.types)
        write_arrays(path, arrays)

    @classmethod
    def load(cls, path: str | Path) -> TwoStageClassifier:
        """Read a classifier saved by save(); a clear error for anything else."""
        with reading_arrays(path, TWO_STAGE_FORMAT, "two-stage classifier", "classifier") as data:
            labels = [str(s) for s in data["labels"]]
            meta = json.loads(str(data["meta"]))
            gate = _read_layers(data, "gate_", path, 2)
            types = _read_layers(data, "type_", path, len(labels) - 1)
        if gate[0][0].shape[0] != types[0][0].shape[0]:
            raise UserFacingError(f"{path}: the gate and the type head read rows of different widths")
        return cls(labels=labels, gate=gate, types=types, meta=meta)


def file_format(path: str | Path) -> str:
    """The format string of a detector .npz ("" when it has none or cannot be read)."""
    try:
        with np.load(Path(path), allow_pickle=False) as data:
            return str(data["format"]) if "format" in data else ""
    except (OSError, ValueError):
        return ""


@dataclass
class ClassifierTrainConfig:
    """Hyperparameters of train_classifier."""

    hidden: int = 0
    """Hidden units; 0 gives softmax regression."""
    l2: float = 1e-3
    """L2 penalty on the weights."""
    epochs: int = 400
    """Full-batch Adam steps."""
    lr: float = 0.01
    """Adam learning rate."""
    seed: int = 0
    """Seed for the initial weights."""
    balanced: bool = True
    """Weight classes inversely to their frequency."""


def train_classifier(x: np.ndarray, y: np.ndarray, labels: list[str], config: ClassifierTrainConfig | None = None) -> TurnClassifier:
    """Fit a TurnClassifier on rows x (n, d) with integer labels y (n,)."""
    cfg = config or ClassifierTrainConfig()
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.int64)
    n, d = x.shape
    k = len(labels)
    if n == 0 or y.shape != (n,) or y.min() < 0 or y.max() >= k:
        raise ValueError("train_classifier needs non-empty rows and labels in range")
    rng = np.random.default_rng(cfg.seed)
    counts = np.bincount(y, minlength=k).astype(np.float64)
    class_w = np.where(counts > 0, n / (k * np.maximum(counts, 1)), 0.0) if cfg.balanced else np.ones(k)
    sample_w = class_w[y] / class_w[y].sum()
    sizes = [d, cfg.hidden, k] if cfg.hidden else [d, k]
    layers = [
        (rng.normal(0, np.sqrt(2.0 / a), (a, b)), np.zeros(b)) for a, b in zip(sizes, sizes[1:], strict=False)
    ]
    fit_adam(layers, x, y, epochs=cfg.epochs, lr=cfg.lr, l2=cfg.l2, sample_weight=sample_w)
    out = [(w.astype(np.float32), b.astype(np.float32)) for w, b in layers]
    return TurnClassifier(labels=list(labels), layers=out, meta={"train": vars(cfg) | {"rows": n}})


def train_two_stage(x: np.ndarray, y: np.ndarray, labels: list[str], config: ClassifierTrainConfig | None = None) -> TwoStageClassifier:
    """Fit the gate on all rows (labels[0] against the rest) and the type head on the other rows only."""
    y = np.asarray(y, dtype=np.int64)
    errors = y > 0
    if not errors.any() or errors.all():
        raise ValueError("train_two_stage needs rows with and without an error")
    gate = train_classifier(x, errors.astype(np.int64), [labels[0], "error"], config)
    types = train_classifier(np.asarray(x)[errors], y[errors] - 1, list(labels[1:]), config)
    meta = {"train": gate.meta["train"] | {"type_rows": int(errors.sum())}}
    return TwoStageClassifier(labels=list(labels), gate=gate.layers, types=types.layers, meta=meta)
