"""The embedded model's context window and threads, and its tool listing's format example (no
weights loaded)."""

from __future__ import annotations

import re
import threading
from pathlib import Path

import pytest

from agent.messages import Message, ModelRequest
from agent.models.local import overflow_message
from agent.models.local_loader import (
    DEFAULT_N_CTX,
    LoadedModel,
    context_size,
    physical_cores,
    trained_context,
)
from agent.models.local_prompt import build_plan
from agent.models.tool_grammar import TOOL_PLACEHOLDER, tools_prompt
from tools.builtin import calculate, think


@pytest.mark.parametrize(
    ("needed", "current", "trained", "size"),
    [
        (3000, 4096, 32768, 4096),  # fits: no re-creation
        (4096, 4096, 32768, 4096),
        (4119 + 512, 4096, 32768, 8192),  # the overflow: doubled
        (9000, 4096, 32768, 9216),  # more than double: rounded up to 1024
        (20000, 16384, 32768, 32768),
        (40000, 16384, 32768, 32768),  # capped at the trained length; the caller reports it
        (40000, 32768, 32768, 32768),
        (5000, 4096, None, 8192),  # trained length unknown: no cap
        (5000, 4096, 4096, 4096),
    ],
)
def test_context_size(needed: int, current: int, trained: int | None, size: int) -> None:
    assert context_size(needed, current, trained) == size


def test_trained_context_comes_from_the_gguf_metadata() -> None:
    assert trained_context({"general.architecture": "qwen2", "qwen2.context_length": "32768"}) == 32768
    assert trained_context({"general.architecture": "llama"}) is None
    assert trained_context({}) is None


def loaded(n_ctx: int, *, automatic: bool, trained: int | None = 32768) -> LoadedModel:
    return LoadedModel(None, None, threading.Lock(), 0.0, "m.gguf", n_ctx=n_ctx, n_ctx_train=trained, automatic=automatic)


def test_overflow_messages_say_which_limit_was_hit_and_what_to_do() -> None:
    fixed = overflow_message(4119, loaded(4096, automatic=False))
    assert fixed.startswith("the conversation is 4119 tokens, too long for the context window of 4096")
    assert "n_ctx=4096 was set" in fixed and "leave it unset" in fixed and "32768" in fixed
    full = overflow_message(40000, loaded(32768, automatic=True))
    assert "the most this model was trained for (n_ctx_train: 32768 tokens)" in full and "n_ctx=" not in full
    assert "n_ctx_train" in overflow_message(40000, loaded(32768, automatic=False))


def test_a_fixed_window_never_grows() -> None:
    model = loaded(2048, automatic=False)
    model.fit(10_000)  # would need a new llama.cpp context, which this test has no weights for
    assert model.n_ctx == 2048 and model.llama is None
    auto = loaded(DEFAULT_N_CTX, automatic=True)
    auto.fit(DEFAULT_N_CTX - 100)
    assert auto.n_ctx == DEFAULT_N_CTX and auto.llama is None


def fake_sysfs(root: Path, topology: list[tuple[int, int]], quota: str | None = None) -> Path:
    sysfs = root / "devices/system/cpu"
    for cpu, (package, core) in enumerate(topology):
        topo = sysfs / f"cpu{cpu}" / "topology"
        topo.mkdir(parents=True)
        (topo / "physical_package_id").write_text(f"{package}\n")
        (topo / "core_id").write_text(f"{core}\n")
    if quota is not None:
        (root / "fs/cgroup").mkdir(parents=True)
        (root / "fs/cgroup/cpu.max").write_text(quota)
    return sysfs


def test_threads_are_the_physical_cores(tmp_path: Path) -> None:
    smt = fake_sysfs(tmp_path / "a", [(0, 0), (0, 1), (0, 0), (0, 1), (1, 0), (1, 0)])  # 2 sockets
    assert physical_cores(list(range(6)), smt) == 3
    assert physical_cores([0, 2], smt) == 1  # two hardware threads of one core
    assert physical_cores([0, 1, 9], smt) == 3  # a CPU without topology counts as one core
    capped = fake_sysfs(tmp_path / "b", [(0, c) for c in range(8)], quota="200000 100000\n")
    assert physical_cores(list(range(8)), capped) == 2
    unlimited = fake_sysfs(tmp_path / "c", [(0, c) for c in range(4)], quota="max 100000\n")
    assert physical_cores(list(range(4)), unlimited) == 4
    assert physical_cores() >= 1


def test_the_format_example_names_no_real_tool() -> None:
    tools = [calculate.openai_schema(), think.openai_schema()]
    for require in (False, True):
        text = tools_prompt(tools, require_tool=require)
        listing, _, instructions = text.partition("\n\n")
        assert "calculate" in listing and "think" in listing
        assert "calculate" not in instructions and "think(" not in instructions
        assert f'"name": "{TOOL_PLACEHOLDER}"' in instructions
    # A function name is letters, digits, _ and -: no tool can be called like the placeholder.
    assert not re.fullmatch(r"[A-Za-z0-9_-]+", TOOL_PLACEHOLDER)
    system = build_plan(ModelRequest(messages=[Message.user("2+2?")], tools=tools)).messages[0]["content"]
    # No JSON example anywhere names a real tool (the old one wrote "calculate", its first tool).
    assert '"calculate"' not in system and '"think"' not in system
