"""Saved KV states of the unchanging prompt prefix (system prompt and tool list) of the embedded model.

llama.cpp reuses the evaluated tokens of the last prompt only. When one loaded model serves
prompts that take turns (the agent and the simulated user of a scenario, an inception module),
each switch throws the other's prefix away, and a long policy with its tool list is evaluated
again on every call: tens of seconds on a small CPU. This cache keeps, per prefix, the KV cells
of llama.cpp's sequence 0 right after the prefix (about 12 KB a token for the 0.5B model), keyed
by a hash of the prefix's tokens, and puts them back before a prompt that starts with it, so
only the rest of the prompt is evaluated.

The prefix boundary comes from the prompt renderer (agent.models.local_prompt.stable_prefix), not
from guesses about the text. The cache is bounded by bytes and by count, least recently used out
first; it belongs to the loaded model and is used with that model's lock held, its own lock only
guards its bookkeeping. A state is plain KV data, independent of the context's size: it is loaded
into a context re-created larger, and dropped if llama.cpp refuses it.
"""

from __future__ import annotations

import ctypes
import hashlib
import threading
import time
from array import array
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

DEFAULT_MAX_STATES = 4
"""Prefix states kept per loaded model unless configured otherwise."""
DEFAULT_MAX_BYTES = 256 * 2**20
"""Bytes of saved KV kept per loaded model: four retail prompts (~3,600 tokens) of the 0.5B model."""
MIN_PREFIX_TOKENS = 128
"""Shorter prefixes are evaluated again: cheaper than keeping and restoring a state for them."""

PrefixStep = Literal["none", "resident", "restore", "evaluate"]


class PrefixStoreLike(Protocol):
    """States kept beyond this process (agent.models.prefix_store.PrefixStore)."""

    def load(self, tokens: Sequence[int]) -> PrefixState | None:
        """The state saved for exactly these tokens, or None."""

    def save(self, state: PrefixState) -> bool:
        """Keep a state; False if it is not kept."""


def prefix_key(tokens: Sequence[int]) -> str:
    """The cache key of a token sequence: a SHA-256 of its 32-bit token ids."""
    return hashlib.sha256(array("i", tokens).tobytes()).hexdigest()


def shared_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """How many leading tokens two sequences share."""
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def reused_tokens(llama: Any, prompt: Sequence[int]) -> int:
    """How many of the prompt's leading tokens llama.cpp will keep from its context rather than
    evaluate (llama-cpp-python's rule: the longest common prefix with the tokens it holds, less
    one when that is the whole prompt, so that a decode refreshes the logits)."""
    shared = shared_prefix(llama.input_ids[: llama.n_tokens].tolist(), prompt)
    if shared >= len(prompt):
        return len(prompt) if llama.n_tokens == len(prompt) and not llama._requires_eval else len(prompt) - 1
    return shared


def prefix_step(shared: int, prompt_len: int, boundary: int, cached: bool, min_tokens: int = MIN_PREFIX_TOKENS) -> PrefixStep:
    """What to do before evaluating a prompt whose first `boundary` tokens are its stable prefix.

    shared: tokens the context has already evaluated in common with the prompt. "none": no prefix
    worth caching (too short, or the whole prompt); "resident": the context holds it already;
    "restore": load the cached state; "evaluate": evaluate the prefix alone and save its state.
    """
    if boundary < min_tokens or boundary >= prompt_len:
        return "none"
    if shared >= boundary:
        return "resident"
    return "restore" if cached else "evaluate"


@dataclass
class PrefixState:
    """The KV state of llama.cpp's sequence 0 after evaluating a prefix."""

    tokens: tuple[int, ...]
    """The prefix's tokens (compared on a hit, so a hash collision cannot restore a wrong state)."""
    data: bytes
    """llama_state_seq_get_data's output."""
    n_ctx: int
    """The context window it was saved from (a smaller context may refuse it)."""

    @property
    def nbytes(self) -> int:
        """Memory the state holds."""
        return len(self.data)


@dataclass
class PrefixCacheStats:
    """What the cache did since it was made."""

    hits: int = 0
    """Prefixes restored from a saved state."""
    resident: int = 0
    """Prompts whose prefix the context still held (llama.cpp's own reuse)."""
    misses: int = 0
    """Prefixes evaluated and saved."""
    evicted: int = 0
    """States dropped to stay within the bounds."""
    refused: int = 0
    """States llama.cpp would not load (a smaller context), dropped."""
    evaluated_tokens: int = 0
    """Prefix tokens evaluated on misses."""
    restored_tokens: int = 0
    """Prefix tokens not evaluated thanks to a hit."""
    restore_seconds: float = 0.0
    """Time spent loading saved states."""
    disk_hits: int = 0
    """Of the hits, states read from the on-disk store (agent.models.prefix_store)."""
    disk_saves: int = 0
    """States written to the on-disk store."""


@dataclass
class CallRecord:
    """What one llama.cpp generation evaluated and reused, for benchmarks (LoadedModel.calls)."""

    prompt_tokens: int
    """Tokens in the prompt."""
    step: PrefixStep
    """What the prefix cache did before it."""
    reused_tokens: int
    """Prompt tokens kept from the context (llama.cpp's own reuse, or a restored state)."""
    restored_tokens: int
    """Of those, the tokens a saved state brought back."""
    evaluated_tokens: int
    """Prompt tokens evaluated (a prefix evaluated on a miss included)."""
    generated_tokens: int
    """Tokens sampled."""
    grammar_masks: int
    """Sampled tokens for which a grammar was tested against the whole vocabulary."""
    prepare_seconds: float
    """Tokenizing the prompt and preparing the prefix (a miss's evaluation, a restore)."""
    seconds: float
    """The whole generation, prepare included."""


@dataclass
class PrefixCache:
    """An LRU of prefix KV states, bounded by bytes and by count."""

    max_bytes: int = DEFAULT_MAX_BYTES
    """Most bytes of states kept; a state larger than this is not kept at all."""
    max_states: int = DEFAULT_MAX_STATES
    """Most states kept (0 disables the cache)."""
    min_tokens: int = MIN_PREFIX_TOKENS
    """Prefixes shorter than this are not cached."""
    stats: PrefixCacheStats = field(default_factory=PrefixCacheStats)
    """Counters, for benchmarks and `rein models bench`."""
    store: PrefixStoreLike | None = None
    """Where states also live across processes (agent.models.prefix_store), consulted on a miss
    and written after one; None: this process only."""
    _states: OrderedDict[str, PrefixState] = field(default_factory=OrderedDict, init=False, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)

    def __len__(self) -> int:
        return len(self._states)

    @property
    def nbytes(self) -> int:
        """Bytes the kept states hold."""
        with self._lock:
            return sum(s.nbytes for s in self._states.values())

    def get(self, tokens: Sequence[int]) -> PrefixState | None:
        """The state saved for exactly these prefix tokens, now the most recently used; or None."""
        key = prefix_key(tokens)
        with self._lock:
            state = self._states.get(key)
            if state is None or state.tokens != tuple(tokens):
                return None
            self._states.move_to_end(key)
            return state

    def __contains__(self, tokens: Sequence[int]) -> bool:
        with self._lock:
            state = self._states.get(prefix_key(tokens))
            return state is not None and state.tokens == tuple(tokens)

    def put(self, state: PrefixState) -> bool:
        """Keep a state (the most recently used), evicting the least recently used to fit; False
        if it cannot be kept (larger than max_bytes, or the cache is disabled)."""
        if state.nbytes > self.max_bytes or self.max_states < 1:
            return False
        with self._lock:
            self._states[prefix_key(state.tokens)] = state
            self._states.move_to_end(prefix_key(state.tokens))
            self._shrink()
        return True

    def drop(self, tokens: Sequence[int]) -> None:
        """Forget the state of these prefix tokens, if kept."""
        with self._lock:
            self._states.pop(prefix_key(tokens), None)

    def configure(self, *, max_bytes: int | None = None, max_states: int | None = None) -> None:
        """Change the bounds; states beyond the new ones are evicted now."""
        with self._lock:
            if max_bytes is not None:
                self.max_bytes = max_bytes
            if max_states is not None:
                self.max_states = max_states
            self._shrink()

    def clear(self) -> None:
        """Forget every state."""
        with self._lock:
            self._states.clear()

    def _shrink(self) -> None:
        total = sum(s.nbytes for s in self._states.values())
        while self._states and (len(self._states) > self.max_states or total > self.max_bytes):
            _key, old = self._states.popitem(last=False)
            total -= old.nbytes
            self.stats.evicted += 1

    def prepare(self, llama: Any, prompt: Sequence[int], boundary: int) -> PrefixStep:
        """Make the llama.cpp context hold the prompt's first `boundary` tokens, from a saved state
        when there is one, evaluating and saving them otherwise. Call with the model's lock held,
        before generating from the prompt: llama.cpp then evaluates only what follows."""
        if self.max_states < 1:
            return "none"
        shared = shared_prefix(llama.input_ids[: llama.n_tokens].tolist(), prompt)
        prefix = list(prompt[:boundary])
        step = prefix_step(shared, len(prompt), boundary, prefix in self, self.min_tokens)
        if step == "resident":
            self.stats.resident += 1
        elif step == "restore":
            state = self.get(prefix)
            started = time.perf_counter()
            if state is not None and restore_state(llama, state):
                self.stats.hits += 1
                self.stats.restored_tokens += boundary
                self.stats.restore_seconds += time.perf_counter() - started
                return step
            if state is not None:
                self.drop(prefix)
                self.stats.refused += 1
            step = "evaluate"
        if step == "evaluate" and self.store is not None:
            started = time.perf_counter()
            state = self.store.load(prefix)
            if state is not None and restore_state(llama, state):
                self.put(state)
                self.stats.hits += 1
                self.stats.disk_hits += 1
                self.stats.restored_tokens += boundary
                self.stats.restore_seconds += time.perf_counter() - started
                return "restore"
            if state is not None:
                self.stats.refused += 1
        if step == "evaluate":
            # From an empty context, even when a few opening tokens are shared: llama.cpp's
            # numbers depend slightly on how the tokens were split into batches, and a state made
            # this one way gives, restored, exactly what evaluating the prefix afresh gives.
            llama.reset()
            llama._ctx.kv_cache_clear()
            llama.eval(prefix)
            self.stats.misses += 1
            self.stats.evaluated_tokens += boundary
            state = save_state(llama, prefix)
            self.put(state)
            if self.store is not None and self.store.save(state):
                self.stats.disk_saves += 1
        return step


def save_state(llama: Any, tokens: Sequence[int]) -> PrefixState:
    """The KV state of sequence 0, which must hold exactly `tokens`."""
    import llama_cpp

    ctx = llama._ctx.ctx
    size = llama_cpp.llama_state_seq_get_size(ctx, 0)
    buf = (ctypes.c_uint8 * size)()
    written = llama_cpp.llama_state_seq_get_data(ctx, buf, size, 0)
    return PrefixState(tuple(tokens), ctypes.string_at(buf, written), llama.n_ctx())


def restore_state(llama: Any, state: PrefixState) -> bool:
    """Load a saved state into sequence 0 in place of what it held; False (and an empty context)
    if llama.cpp refuses it, as a context too small for it does."""
    import llama_cpp

    llama.reset()
    llama._ctx.kv_cache_clear()
    src = (ctypes.c_uint8 * state.nbytes).from_buffer_copy(state.data)
    if llama_cpp.llama_state_seq_set_data(llama._ctx.ctx, src, state.nbytes, 0) != state.nbytes:
        llama._ctx.kv_cache_clear()
        return False
    n = len(state.tokens)
    llama.input_ids[:n] = state.tokens
    llama.n_tokens = n
    # No live logits after a restore: llama.cpp must decode before it samples (it does, since
    # the prompt always continues past the prefix; this keeps an exact-match shortcut honest).
    llama._requires_eval = True
    return True
