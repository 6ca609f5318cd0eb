"""Prefix KV states on disk, so a long system block is evaluated once per machine, not once per process.

The in-memory PrefixCache (agent.models.prefix_cache) saves a process from evaluating the retail
policy and tool list (~3,600 tokens) again, but every new process (a benchmark, a test session,
`rein run`) pays for it anew: about a minute for the 0.5B model on two cores, more for the 1.5B.
This store keeps the same states as files in the user's cache folder, one per (model context,
prefix tokens), and the cache loads one before it would evaluate the prefix.

A state only stands in for evaluating its prefix if it was made the same way: the file names the
model file (path, size, mtime), llama-cpp-python's version, the CPU features its library was
compiled for (two builds of one version with other flags, say native and portable AVX2, compute
slightly different numbers) and the context settings that change llama.cpp's numbers (threads,
batch sizes, KV types), and a state from any other context is never looked at.
Each file carries its prefix tokens and a sha256 of its data; one that does not match, is cut
short or is not ours is deleted, never loaded. Writes go to a temporary file renamed into
place, so readers and concurrent writers see whole files only. The folder is bounded by bytes,
least recently used out first (a load touches its file).

Where: $REIN_PREFIX_STORE if set ("off", "0" or "" turns the store off), else the folder
`prefix-states` in rein's cache folder (agent.models.gguf.cache_dir). Bound:
$REIN_PREFIX_STORE_MAX_BYTES, default DEFAULT_STORE_BYTES.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
from array import array
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agent.models.gguf import cache_dir
from agent.models.prefix_cache import PrefixState, prefix_key

DEFAULT_STORE_BYTES = 1024 * 2**20
"""Bytes of states kept on disk unless $REIN_PREFIX_STORE_MAX_BYTES says otherwise: the retail and
airline blocks of both bundled Qwen models (~44 MB a block for the 0.5B, ~103 MB for the 1.5B)."""
_MAGIC = b"REIN-PREFIX-STATE 1\n"
_SUFFIX = ".kvstate"
_OFF = ("", "0", "off", "false", "no")


class StoreFileError(ValueError):
    """A state file that is not a whole, matching state of this store."""


def context_signature(llama: Any) -> str:
    """What, besides the prefix tokens, decides a saved state's numbers: the model file, the
    llama.cpp build and the context settings (a state from another is not a stand-in)."""
    import llama_cpp

    path = Path(llama.model_path).resolve()
    st = path.stat()
    params = llama.context_params
    parts = {
        "model": str(path),
        "size": st.st_size,
        "mtime_ns": st.st_mtime_ns,
        "llama_cpp": llama_cpp.__version__,
        "build": llama_build(),
        "n_threads": params.n_threads,
        "n_threads_batch": params.n_threads_batch,
        "n_batch": params.n_batch,
        "n_ubatch": params.n_ubatch,
        "type_k": params.type_k,
        "type_v": params.type_v,
        "flash_attn": getattr(params, "flash_attn_type", getattr(params, "flash_attn", None)),
    }
    return json.dumps(parts, sort_keys=True, default=str)


def llama_build() -> str:
    """The CPU features the llama.cpp library was compiled for ("" where llama-cpp-python does not say).

    Not the library's mtime or hash: every install rebuilds it (with the same flags, and the build's
    temporary paths inside), which would void every saved state at each install."""
    import llama_cpp

    try:
        return str(llama_cpp.llama_print_system_info().decode("utf-8", "replace").strip())
    except Exception:  # an older or stripped build without the call
        return ""


@dataclass
class PrefixStore:
    """A folder of prefix states for one model context, bounded by bytes."""

    root: Path
    """The folder (shared by every model context; file names tell them apart)."""
    signature: str
    """context_signature of the context whose states this store reads and writes."""
    max_bytes: int = DEFAULT_STORE_BYTES
    """Most bytes of state files kept in root; a state larger than this is not written."""

    @classmethod
    def from_env(cls, llama: Any) -> PrefixStore | None:
        """The store for a llama.cpp context as the environment configures it; None when off."""
        where = os.environ.get("REIN_PREFIX_STORE")
        if where is not None and where.strip().lower() in _OFF:
            return None
        root = Path(where).expanduser() if where else cache_dir() / "prefix-states"
        limit = os.environ.get("REIN_PREFIX_STORE_MAX_BYTES")
        try:
            max_bytes = int(limit) if limit else DEFAULT_STORE_BYTES
        except ValueError:
            raise ValueError(f"REIN_PREFIX_STORE_MAX_BYTES must be a number of bytes, not {limit!r}") from None
        return cls(root, context_signature(llama), max_bytes)

    def path_for(self, tokens: Sequence[int]) -> Path:
        """The file that holds (or would hold) the state of these prefix tokens."""
        name = hashlib.sha256(f"{self.signature}\n{prefix_key(tokens)}".encode()).hexdigest()[:40]
        return self.root / f"{name}{_SUFFIX}"

    def load(self, tokens: Sequence[int]) -> PrefixState | None:
        """The state saved for exactly these tokens in this context, or None. A file that is
        damaged or does not match is deleted."""
        path = self.path_for(tokens)
        try:
            raw = path.read_bytes()
        except OSError:
            return None
        try:
            state = decode(raw, self.signature, tokens)
        except StoreFileError:
            with contextlib.suppress(OSError):
                path.unlink()
            return None
        with contextlib.suppress(OSError):
            os.utime(path)  # most recently used
        return state

    def save(self, state: PrefixState) -> bool:
        """Write a state (atomically), then trim the folder to max_bytes; False if it is not kept
        (larger than the bound, or the folder cannot be written)."""
        blob = encode(state, self.signature)
        if len(blob) > self.max_bytes:
            return False
        path = self.path_for(state.tokens)
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=self.root, prefix=f".{path.name}.", suffix=".tmp")
            try:
                with os.fdopen(fd, "wb") as f:
                    f.write(blob)
                os.replace(tmp, path)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
                raise
        except OSError:
            return False
        self.trim(keep=path)
        return True

    def trim(self, keep: Path | None = None) -> int:
        """Delete the least recently used state files until the folder holds at most max_bytes
        (keep, the file just written, goes last); the bytes left."""
        files: list[tuple[int, int, Path]] = []
        for p in self.root.glob(f"*{_SUFFIX}"):
            with contextlib.suppress(OSError):
                st = p.stat()
                files.append((1 if p == keep else 0, st.st_mtime_ns, p))
        files.sort()
        total = sum(p.stat().st_size for _k, _m, p in files if p.exists())
        for _keep, _mtime, p in files:
            if total <= self.max_bytes:
                break
            with contextlib.suppress(OSError):
                size = p.stat().st_size
                p.unlink()
                total -= size
        return total


def encode(state: PrefixState, signature: str) -> bytes:
    """A state file's bytes: magic, a JSON header line, the prefix tokens, the KV data."""
    tokens = array("i", state.tokens).tobytes()
    header = {
        "signature": signature,
        "n_tokens": len(state.tokens),
        "n_ctx": state.n_ctx,
        "data_bytes": len(state.data),
        "sha256": hashlib.sha256(tokens + state.data).hexdigest(),
    }
    return _MAGIC + json.dumps(header, sort_keys=True).encode() + b"\n" + tokens + state.data


def decode(raw: bytes, signature: str, tokens: Sequence[int]) -> PrefixState:
    """The state in a file's bytes, checked against the context and the prefix it must hold;
    StoreFileError for anything else."""
    if not raw.startswith(_MAGIC):
        raise StoreFileError("not a rein prefix state")
    end = raw.find(b"\n", len(_MAGIC))
    try:
        header = json.loads(raw[len(_MAGIC) : end])
        n_tokens, n_ctx, size, digest = (
            int(header["n_tokens"]), int(header["n_ctx"]), int(header["data_bytes"]), str(header["sha256"])
        )
    except (ValueError, KeyError, TypeError) as exc:
        raise StoreFileError(f"bad header: {exc}") from None
    if end < 0 or header.get("signature") != signature:
        raise StoreFileError("made by another model or context")
    body = raw[end + 1 :]
    if n_tokens != len(tokens) or len(body) != 4 * n_tokens + size:
        raise StoreFileError("cut short, or for another prefix")
    if hashlib.sha256(body).hexdigest() != digest:
        raise StoreFileError("damaged (sha256 mismatch)")
    held = tuple(array("i", body[: 4 * n_tokens]))
    if held != tuple(tokens):
        raise StoreFileError("holds another prefix")
    return PrefixState(held, body[4 * n_tokens :], n_ctx)
