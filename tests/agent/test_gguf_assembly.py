"""Assembling the embedded model file: join parts in order, verify sha256, cache, detect corruption."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from agent.models import gguf
from agent.models.gguf import (
    LocalModelSpec,
    ModelFileError,
    assemble,
    ensure_model_file,
    locate_parts,
    verify_file,
)

pytestmark = pytest.mark.core  # needs no extra: also run on the bare core install (.ci/core_check.sh)


def make_parts(folder: Path, sizes: tuple[int, ...] = (3000, 5000, 1234)) -> tuple[list[Path], str]:
    """Synthetic part files with distinct content, and the sha256 of their concatenation."""
    folder.mkdir(parents=True, exist_ok=True)
    parts, whole = [], b""
    for i, size in enumerate(sizes):
        data = bytes((i * 31 + j) % 251 for j in range(size))
        path = folder / f"part{i + 1:02d}.bin"
        path.write_bytes(data)
        parts.append(path)
        whole += data
    return parts, hashlib.sha256(whole).hexdigest()


def test_joins_in_order_and_verifies(tmp_path: Path) -> None:
    parts, sha = make_parts(tmp_path / "parts")
    dest = tmp_path / "cache" / "model.gguf"
    assert assemble(parts, dest, sha) == dest
    assert dest.read_bytes() == b"".join(p.read_bytes() for p in parts)
    assert (dest.stat().st_mode & 0o777) == 0o644
    assert not [p for p in dest.parent.iterdir() if p.name.endswith(".part")]  # no temp left


def test_wrong_order_fails_the_hash_and_leaves_no_file(tmp_path: Path) -> None:
    parts, sha = make_parts(tmp_path / "parts")
    dest = tmp_path / "cache" / "model.gguf"
    with pytest.raises(ModelFileError, match="sha256"):
        assemble(list(reversed(parts)), dest, sha)
    assert not dest.exists()
    assert not [p for p in dest.parent.iterdir() if p.suffix in (".part", ".gguf")]


def test_reuses_a_valid_cache_without_reading_parts(tmp_path: Path) -> None:
    parts, sha = make_parts(tmp_path / "parts")
    dest = tmp_path / "cache" / "model.gguf"
    assemble(parts, dest, sha)
    mtime = dest.stat().st_mtime_ns
    for p in parts:  # a rebuild would now produce garbage and fail the hash
        p.write_bytes(b"x" * p.stat().st_size)
    assert assemble(parts, dest, sha) == dest
    assert dest.stat().st_mtime_ns == mtime


def test_corrupt_cache_is_detected_and_rebuilt(tmp_path: Path) -> None:
    parts, sha = make_parts(tmp_path / "parts")
    dest = tmp_path / "cache" / "model.gguf"
    assemble(parts, dest, sha)
    with dest.open("r+b") as f:  # same size, one flipped byte
        f.seek(100)
        byte = f.read(1)
        f.seek(100)
        f.write(bytes([byte[0] ^ 0xFF]))
    assert not verify_file(dest, sha)
    assemble(parts, dest, sha)
    assert hashlib.sha256(dest.read_bytes()).hexdigest() == sha


def test_truncated_cache_and_stale_stamp_are_not_trusted(tmp_path: Path) -> None:
    parts, sha = make_parts(tmp_path / "parts")
    dest = tmp_path / "cache" / "model.gguf"
    assemble(parts, dest, sha)
    stat = dest.stat()
    dest.write_bytes(dest.read_bytes()[:-10])
    os.utime(dest, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # even with the old mtime
    assert not verify_file(dest, sha)
    assemble(parts, dest, sha)
    assert verify_file(dest, sha, full=True)


def test_full_verify_catches_what_the_cheap_stamp_check_cannot(tmp_path: Path) -> None:
    parts, sha = make_parts(tmp_path / "parts")
    dest = tmp_path / "cache" / "model.gguf"
    assemble(parts, dest, sha)
    stat = dest.stat()
    data = bytearray(dest.read_bytes())
    data[5] ^= 0x01
    dest.write_bytes(bytes(data))
    os.utime(dest, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # forged size and mtime
    assert verify_file(dest, sha)  # the stamp vouches ...
    assert not verify_file(dest, sha, full=True)  # ... the hash does not
    assemble(parts, dest, sha, full=True)
    assert verify_file(dest, sha, full=True)


def test_missing_part_and_size_mismatch_are_clear_errors(tmp_path: Path) -> None:
    parts, sha = make_parts(tmp_path / "parts")
    dest = tmp_path / "cache" / "model.gguf"
    with pytest.raises(ModelFileError, match="part02.bin"):
        assemble([parts[0], tmp_path / "parts" / "nope" / "part02.bin"], dest, sha)
    with pytest.raises(ModelFileError, match="add up to 9234 bytes"):
        assemble(parts, dest, sha, size=9999)
    with pytest.raises(ModelFileError, match="no part files"):
        assemble([], dest, sha)
    assert not dest.exists()


def test_concurrent_processes_produce_one_whole_file(tmp_path: Path) -> None:
    parts, sha = make_parts(tmp_path / "parts", sizes=(2_000_000, 3_000_000))
    dest = tmp_path / "cache" / "model.gguf"
    script = textwrap.dedent(
        f"""
        from pathlib import Path
        from agent.models.gguf import assemble
        parts = [Path(p) for p in {[str(p) for p in parts]!r}]
        assemble(parts, Path({str(dest)!r}), {sha!r})
        """
    )
    root = Path(__file__).resolve().parents[2]
    procs = [
        subprocess.Popen([sys.executable, "-c", script], cwd=root, stderr=subprocess.PIPE)
        for _ in range(3)
    ]
    for proc in procs:
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err.decode()
    assert hashlib.sha256(dest.read_bytes()).hexdigest() == sha
    assert not [p for p in dest.parent.iterdir() if p.name.endswith(".part")]


def _fake_distribution(site: Path, name: str, files: dict[str, bytes]) -> None:
    """An installed distribution (dist-info with a RECORD) made by hand, importable by metadata."""
    mod = name.replace("-", "_")
    info = site / f"{mod}-0.1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1.0\n")
    record = []
    for rel, data in files.items():
        path = site / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        record.append(f"{rel},,{len(data)}")
    record.append(f"{info.name}/METADATA,,")
    (info / "RECORD").write_text("\n".join(record) + "\n")


def test_parts_are_located_from_installed_records_without_importing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    site = tmp_path / "site"
    # The packages' __init__ would fail loudly if imported.
    boom = b"raise RuntimeError('imported!')\n"
    _fake_distribution(site, "rein-fake-part1", {"rein_fake_part1/__init__.py": boom, "rein_fake_part1/data/part01.bin": b"AAAA"})
    _fake_distribution(site, "rein-fake-part2", {"rein_fake_part2/__init__.py": boom, "rein_fake_part2/data/part02.bin": b"BB"})
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.setenv("REIN_CACHE_DIR", str(tmp_path / "cache"))
    sha = hashlib.sha256(b"AAAABB").hexdigest()
    spec = LocalModelSpec(
        name="fake", filename="fake.gguf", distributions=("rein-fake-part1", "rein-fake-part2"),
        part_pattern="*/data/part*.bin", sha256=sha, size=6, license="-", description="-",
        pip_spec="rein-fake-part1 rein-fake-part2",
    )
    monkeypatch.setitem(gguf.LOCAL_MODELS, "fake", spec)
    assert [p.name for p in locate_parts(spec)] == ["part01.bin", "part02.bin"]
    path = ensure_model_file("fake")
    assert path == tmp_path / "cache" / "fake.gguf" and path.read_bytes() == b"AAAABB"
    assert "rein_fake_part1" not in sys.modules

    # A part file deleted from an installed package, and a package that is not installed.
    (site / "rein_fake_part2" / "data" / "part02.bin").unlink()
    path.unlink()
    with pytest.raises(ModelFileError, match="part02.bin of package rein-fake-part2 is missing"):
        ensure_model_file("fake")
    missing = LocalModelSpec(**{**spec.__dict__, "distributions": ("rein-fake-part1", "rein-not-installed-xyz")})
    with pytest.raises(ModelFileError, match="'rein-not-installed-xyz' is not installed"):
        locate_parts(missing)


def test_unknown_model_name_lists_the_known_ones() -> None:
    with pytest.raises(ModelFileError, match="qwen2.5-coder-0.5b"):
        ensure_model_file("gpt-17")


def test_cache_dir_follows_the_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("REIN_CACHE_DIR", str(tmp_path / "a"))
    assert gguf.cache_dir() == tmp_path / "a"
    monkeypatch.delenv("REIN_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert gguf.cache_dir() == tmp_path / "xdg" / "rein"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert gguf.cache_dir() == Path.home() / ".cache" / "rein"


@pytest.mark.slow
def test_real_model_file_is_assembled_and_verified(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The six installed part packages join into the known Qwen2.5-Coder GGUF (about 4 s)."""
    monkeypatch.setenv("REIN_CACHE_DIR", str(tmp_path))
    spec = gguf.LOCAL_MODELS["qwen2.5-coder-0.5b"]
    path = ensure_model_file("qwen2.5-coder-0.5b")
    assert path == tmp_path / spec.filename
    assert path.stat().st_size == spec.size
    with path.open("rb") as f:
        assert f.read(4) == b"GGUF"
    assert verify_file(path, spec.sha256)  # the stamp written during assembly vouches now
