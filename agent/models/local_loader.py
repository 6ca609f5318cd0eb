"""Loading the embedded model: one llama.cpp model per process and settings, its thread count and
its context window, sized to the job.

A load is keyed by (file, n_ctx, threads) and shared by every LocalModel that asks for it; its lock
serialises use, since a llama.cpp context is not thread-safe. An automatic window (n_ctx None)
starts at DEFAULT_N_CTX and is re-created larger when a request needs more, up to the length the
model was trained for (GGUF metadata).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agent.extras import needs_extra
from agent.models.base import ModelError
from agent.models.gguf import ModelFileError
from agent.models.prefix_cache import CallRecord, PrefixCache
from agent.models.prefix_store import PrefixStore

DEFAULT_N_CTX = 4096
"""The context window an automatically sized model starts with."""
_CTX_STEP = 1024


def context_size(needed: int, current: int, trained: int | None) -> int:
    """The context window for a request needing `needed` tokens (prompt plus reply budget).

    The current window when it suffices; else at least double it, rounded up to a multiple of
    1024 tokens, so a growing conversation re-creates the context a few times, not every turn;
    never beyond the trained length (None: unknown, no cap). The result may still be smaller
    than needed: the caller shortens the reply or reports the overflow.
    """
    if needed <= current:
        return current
    grown = max(2 * current, -(-needed // _CTX_STEP) * _CTX_STEP)
    return max(current, min(grown, trained)) if trained else grown


@dataclass
class LoadedModel:
    """A llama.cpp model loaded once per process, with the lock that serialises its use."""

    llama: Any
    """The llama_cpp.Llama object (replaced when an automatic context grows)."""
    formatter: Any
    """The chat formatter built from the GGUF's own chat template."""
    lock: threading.Lock
    """Held while the model generates or tokenizes."""
    load_seconds: float
    """Wall time the load took."""
    path: str
    """The GGUF file."""
    n_threads: int = 1
    """llama.cpp threads."""
    n_ctx: int = DEFAULT_N_CTX
    """The context window now."""
    n_ctx_train: int | None = None
    """The context length the model was trained for (GGUF metadata), None if it does not say."""
    automatic: bool = False
    """Whether the window grows on demand (n_ctx was not given) or stays as given."""
    closed_formatter: Any = None
    """The chat formatter without the generation prompt, which renders the system block alone."""
    prefix_cache: PrefixCache = field(default_factory=PrefixCache)
    """Saved KV states of system blocks, shared by every LocalModel on this load; kept across a
    context re-created larger (its states load into the larger one)."""
    calls: deque[CallRecord] = field(default_factory=lambda: deque(maxlen=_KEPT_CALLS))
    """The latest generations' token accounting, oldest first (benchmarks read and clear it)."""

    def fit(self, needed: int) -> None:
        """Grow an automatic context window so `needed` tokens fit, as far as the model allows.

        Call with the lock held. Re-creating the context keeps the weights' pages (mapped from
        the file) but drops llama.cpp's cached prompt prefix, so it is done rarely (doubling).
        """
        if not self.automatic:
            return
        size = context_size(needed, self.n_ctx, self.n_ctx_train)
        if size == self.n_ctx:
            return
        started = time.perf_counter()
        grown = _open_llama(self.path, size, self.n_threads)
        old, self.llama, self.n_ctx = self.llama, grown, size
        with contextlib.suppress(Exception):
            old.close()
        self.load_seconds += time.perf_counter() - started


_KEPT_CALLS = 4096
_LOADED: dict[tuple[str, int, int], LoadedModel] = {}
_LOADED_LOCK = threading.Lock()


@atexit.register
def _close_all() -> None:
    # Freed explicitly while the interpreter is intact: llama.cpp's finalizers fail noisily when
    # they run during interpreter teardown.
    with _LOADED_LOCK:
        for loaded in _LOADED.values():
            if not loaded.lock.acquire(timeout=5):  # still generating: leave it to the OS
                continue
            try:
                with contextlib.suppress(Exception):
                    loaded.llama.close()
            finally:
                loaded.lock.release()
        _LOADED.clear()


def _allowed_cpus() -> list[int]:
    try:
        return sorted(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return list(range(os.cpu_count() or 1))


def physical_cores(cpus: list[int] | None = None, sysfs: Path = Path("/sys/devices/system/cpu")) -> int:
    """Physical cores among the CPUs this process may use (SMT siblings count once), at least one.

    Read from Linux's CPU topology; where it cannot be read, every allowed CPU counts. A cgroup
    CPU quota (a container limited to N CPUs) caps the count.
    """
    cpus = _allowed_cpus() if cpus is None else cpus
    cores: set[tuple[str, str]] = set()
    for cpu in cpus:
        topo = sysfs / f"cpu{cpu}" / "topology"
        try:
            cores.add(((topo / "physical_package_id").read_text().strip(), (topo / "core_id").read_text().strip()))
        except OSError:
            cores.add(("cpu", str(cpu)))
    count = len(cores)
    with contextlib.suppress(OSError, ValueError):
        quota, period = (sysfs.parents[2] / "fs/cgroup/cpu.max").read_text().split()[:2]
        if quota != "max":
            count = min(count, -(-int(quota) // int(period)))
    return max(1, count)


def default_threads() -> int:
    """The physical cores: llama.cpp's matrix work gains nothing from a core's second hardware
    thread, and two threads on one core slow each other down."""
    return physical_cores()


def _open_llama(path: str, n_ctx: int, threads: int) -> Any:
    with needs_extra("local", "the embedded model"):
        import llama_cpp

    try:
        return llama_cpp.Llama(
            model_path=path,
            n_ctx=n_ctx,
            n_threads=threads,
            n_threads_batch=threads,
            verbose=False,
        )
    except (ValueError, RuntimeError, OSError) as exc:
        raise ModelFileError(f"llama.cpp could not load {path} with n_ctx={n_ctx}: {exc}") from None


def trained_context(metadata: dict[str, str]) -> int | None:
    """The context length a GGUF says its model was trained for (`<arch>.context_length`)."""
    arch = metadata.get("general.architecture")
    try:
        return int(metadata[f"{arch}.context_length"])
    except (KeyError, TypeError, ValueError):
        return None


def load_model(path: str | Path, n_ctx: int | None = None, n_threads: int | None = None) -> LoadedModel:
    """The process-wide llama.cpp model for (path, n_ctx, n_threads), loaded on first use.

    n_ctx None sizes the context window automatically (LoadedModel.fit); models with a given n_ctx
    and the automatic one are separate loads.
    """
    threads = n_threads or default_threads()
    key = (str(Path(path).resolve()), n_ctx or 0, threads)
    with _LOADED_LOCK:
        if key in _LOADED:
            return _LOADED[key]
        # OpenMP threads that spin while waiting starve each other on a shared machine; must be
        # set before llama.cpp's runtime starts.
        os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
        try:
            from llama_cpp import llama_chat_format
        except ImportError as exc:
            raise ModelError(
                f"the embedded model needs llama-cpp-python ({exc}); pip install llama-cpp-python"
            ) from None
        started = time.perf_counter()
        size = n_ctx or DEFAULT_N_CTX
        llama = _open_llama(key[0], size, threads)
        trained = trained_context(llama.metadata)
        if n_ctx is None and trained and trained < size:
            # A model trained on fewer tokens than the starting window starts at its own limit.
            llama.close()
            size = trained
            llama = _open_llama(key[0], size, threads)
        template = llama.metadata.get("tokenizer.chat_template")
        if not template:
            raise ModelFileError(f"{key[0]} has no chat template in its metadata")
        eos = llama.token_eos()
        bos = llama.token_bos()
        formatters = [
            llama_chat_format.Jinja2ChatFormatter(
                template=template,
                eos_token=_token_text(llama, eos),
                bos_token=_token_text(llama, bos),
                add_generation_prompt=generation,
                stop_token_ids=[eos],
            )
            for generation in (True, False)
        ]
        loaded = LoadedModel(
            llama,
            formatters[0],
            threading.Lock(),
            time.perf_counter() - started,
            key[0],
            n_threads=threads,
            n_ctx=size,
            n_ctx_train=trained,
            automatic=n_ctx is None,
            closed_formatter=formatters[1],
        )
        try:
            loaded.prefix_cache.store = PrefixStore.from_env(llama)
        except ValueError as exc:
            llama.close()
            raise ModelError(str(exc)) from None
        _LOADED[key] = loaded
        return loaded


def _token_text(llama: Any, token: int) -> str:
    if token == -1:
        return ""
    return llama.detokenize([token], special=True).decode("utf-8", errors="replace")


__all__ = ["DEFAULT_N_CTX", "LoadedModel", "context_size", "default_threads", "load_model", "physical_cores",
           "trained_context"]
