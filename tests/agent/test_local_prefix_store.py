"""The on-disk store of prefix KV states: files saved and read back (in another process too),
damaged and mismatched files rejected and deleted, the byte bound, the environment's switches
(no weights loaded; test_local_speed_model.py uses the real model)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from agent.models.prefix_cache import PrefixState
from agent.models.prefix_store import PrefixStore, StoreFileError, decode, encode

SIG = '{"model": "m.gguf", "n_threads": 2}'
TOKENS = tuple(range(100, 400))


def state(tokens: tuple[int, ...] = TOKENS, nbytes: int = 4096, fill: int = 7) -> PrefixState:
    return PrefixState(tokens, bytes([fill]) * nbytes, 8192)


def test_a_saved_state_loads_back_whole(tmp_path: Path) -> None:
    store = PrefixStore(tmp_path / "states", SIG)
    assert store.load(TOKENS) is None
    assert store.save(state())
    got = store.load(TOKENS)
    assert got == state()
    assert [p.name for p in (tmp_path / "states").iterdir()] == [store.path_for(TOKENS).name]  # no temp files left


def test_another_process_reads_what_this_one_saved(tmp_path: Path) -> None:
    PrefixStore(tmp_path, SIG).save(state(fill=9))
    code = (
        "import sys; from pathlib import Path; from agent.models.prefix_store import PrefixStore\n"
        f"s = PrefixStore(Path(sys.argv[1]), {SIG!r}).load(tuple(range(100, 400)))\n"
        "print(len(s.data), s.data[:3].hex(), s.n_ctx)\n"
    )
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": str(root)}
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, env=env, check=True)
    assert out.stdout.split() == ["4096", "090909", "8192"]


def test_another_context_or_prefix_never_reads_the_file(tmp_path: Path) -> None:
    PrefixStore(tmp_path, SIG).save(state())
    assert PrefixStore(tmp_path, SIG.replace("2", "1")).load(TOKENS) is None  # other threads: other file
    assert PrefixStore(tmp_path, SIG).load(TOKENS[:-1]) is None
    # The same file handed another context's signature or prefix is refused by its header.
    blob = encode(state(), SIG)
    with pytest.raises(StoreFileError, match="another model"):
        decode(blob, SIG + " ", TOKENS)
    with pytest.raises(StoreFileError, match="another prefix"):
        decode(blob, SIG, (*TOKENS[:-1], 5))


@pytest.mark.parametrize(
    "damage",
    [
        lambda b: b[:-1],  # cut short
        lambda b: b[:-10] + bytes(10),  # data changed
        lambda b: b"garbage" + b,  # not ours
        lambda b: b.replace(b'"n_tokens": 300', b'"n_tokens": 3x0'),  # bad header
        lambda b: b"",
    ],
)
def test_a_damaged_file_is_rejected_and_deleted(tmp_path: Path, damage: Any) -> None:
    store = PrefixStore(tmp_path, SIG)
    store.save(state())
    path = store.path_for(TOKENS)
    path.write_bytes(damage(path.read_bytes()))
    assert store.load(TOKENS) is None
    assert not path.exists()
    assert store.save(state()) and store.load(TOKENS) == state()  # and is written again


def test_the_folder_stays_within_its_bytes_least_recently_used_out(tmp_path: Path) -> None:
    one = len(encode(state(), SIG))
    store = PrefixStore(tmp_path, SIG, max_bytes=2 * one + 10)
    a, b, c = ((i, *TOKENS) for i in range(3))
    store.save(state(a))
    store.save(state(b))
    os.utime(store.path_for(a), ns=(1, 1))
    os.utime(store.path_for(b), ns=(2, 2))
    assert store.load(a) is not None  # a is now the most recently used
    store.save(state(c))
    assert store.load(b) is None and store.load(a) is not None and store.load(c) is not None
    assert sum(p.stat().st_size for p in tmp_path.iterdir()) <= store.max_bytes
    assert not store.save(state(nbytes=3 * one))  # larger than the bound: not written
    assert len(list(tmp_path.iterdir())) == 2


def test_the_environment_chooses_the_folder_the_bound_or_off(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    class Params:
        n_threads = n_threads_batch = 2
        n_batch = n_ubatch = 512
        type_k = type_v = 1
        flash_attn_type = 0

    class FakeLlama:  # what context_signature reads of a llama_cpp.Llama
        model_path = str(tmp_path / "m.gguf")
        context_params = Params()

    Path(FakeLlama.model_path).write_bytes(b"GGUF")
    monkeypatch.setenv("REIN_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("REIN_PREFIX_STORE", raising=False)
    monkeypatch.delenv("REIN_PREFIX_STORE_MAX_BYTES", raising=False)
    store = PrefixStore.from_env(FakeLlama())
    assert store is not None and store.root == tmp_path / "cache" / "prefix-states"
    assert '"n_threads": 2' in store.signature and "m.gguf" in store.signature
    # The CPU features llama.cpp was compiled for are part of it: a state from a native build
    # never stands in for the portable one.
    assert "CPU" in store.signature
    monkeypatch.setenv("REIN_PREFIX_STORE", str(tmp_path / "elsewhere"))
    monkeypatch.setenv("REIN_PREFIX_STORE_MAX_BYTES", "1000")
    store = PrefixStore.from_env(FakeLlama())
    assert store is not None and store.root == tmp_path / "elsewhere" and store.max_bytes == 1000
    for off in ("off", "0", ""):
        monkeypatch.setenv("REIN_PREFIX_STORE", off)
        assert PrefixStore.from_env(FakeLlama()) is None
    monkeypatch.setenv("REIN_PREFIX_STORE", str(tmp_path))
    monkeypatch.setenv("REIN_PREFIX_STORE_MAX_BYTES", "lots")
    with pytest.raises(ValueError, match="REIN_PREFIX_STORE_MAX_BYTES"):
        PrefixStore.from_env(FakeLlama())


def test_an_unwritable_folder_only_means_no_store(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    store = PrefixStore(blocker / "states", SIG)
    assert not store.save(state()) and store.load(TOKENS) is None

