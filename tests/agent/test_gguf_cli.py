"""`rein models`: the listing, `prepare` on the real parts, and a clear error for a bad name."""

from __future__ import annotations

import pytest

from agent.cli import main
from agent.models.gguf import LOCAL_MODELS, cache_dir

pytestmark = pytest.mark.core  # needs no extra: also run on the bare core install (.ci/core_check.sh)


def test_lists_every_provider(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["models"]) == 0
    out = capsys.readouterr().out
    for name in ("local:qwen2.5-coder-0.5b", "local:smollm2-135m", "openai:MODEL", "cassette:PATH", "echo"):
        assert name in out
    default = next(line for line in out.splitlines() if "(default)" in line)
    assert default.startswith("local:qwen2.5-coder-1.5b")


def test_unknown_local_model_is_a_user_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["models", "prepare", "local:gpt-17"]) == 2
    err = capsys.readouterr().err
    assert "unknown local model 'gpt-17'" in err and "Traceback" not in err


@pytest.mark.slow
def test_prepare_prints_the_verified_file(capsys: pytest.CaptureFixture[str]) -> None:
    # The user's cache, as the embedded-model tests use it: assembled once, reused after.
    spec = LOCAL_MODELS["qwen2.5-coder-1.5b"]  # the default model
    assert main(["models", "prepare"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == str(cache_dir() / spec.filename)
    assert lines[1].startswith(f"{spec.size} bytes") and spec.sha256 in lines[1]
    assert main(["models"]) == 0
    assert "ready (491 MB, verified)" in capsys.readouterr().out
