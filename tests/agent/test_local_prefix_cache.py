"""The prefix-state cache of the embedded model: its LRU, keys and decisions, and the prefix
boundary the prompt renderer gives (no weights loaded)."""

from __future__ import annotations

import threading

import pytest
from llama_cpp import llama_chat_format

from agent.messages import Message, ModelRequest
from agent.models.local_loader import LoadedModel
from agent.models.local_prompt import ToolProtocol, build_plan, render_prompt, stable_prefix
from agent.models.prefix_cache import (
    PrefixCache,
    PrefixState,
    prefix_key,
    prefix_step,
    shared_prefix,
)
from tools.builtin import calculate


def state(tokens: list[int], nbytes: int, n_ctx: int = 4096) -> PrefixState:
    return PrefixState(tuple(tokens), bytes(nbytes), n_ctx)


def test_keys_are_the_token_sequence_not_its_text() -> None:
    assert prefix_key([1, 2, 3]) == prefix_key((1, 2, 3))
    assert prefix_key([1, 2, 3]) != prefix_key([1, 2, 4])
    assert prefix_key([1, 2]) != prefix_key([1, 2, 0])
    # 32-bit ids: a large id is not confused with two small ones.
    assert prefix_key([70000]) != prefix_key([4464, 1])


def test_shared_prefix() -> None:
    assert shared_prefix([1, 2, 3, 4], [1, 2, 9]) == 2
    assert shared_prefix([1, 2], [1, 2, 3]) == 2
    assert shared_prefix([], [1]) == 0
    assert shared_prefix([5], [1]) == 0


def test_lru_by_count_evicts_the_least_recently_used() -> None:
    cache = PrefixCache(max_bytes=10_000, max_states=2)
    a, b, c = [1] * 3, [2] * 3, [3] * 3
    assert cache.put(state(a, 100)) and cache.put(state(b, 100))
    assert cache.get(a) is not None  # a is now the most recently used
    cache.put(state(c, 100))
    assert a in cache and c in cache and b not in cache
    assert len(cache) == 2 and cache.nbytes == 200 and cache.stats.evicted == 1


def test_lru_by_bytes() -> None:
    cache = PrefixCache(max_bytes=250, max_states=10)
    for i in range(3):
        cache.put(state([i] * 4, 100))
    assert [i for i in range(3) if [i] * 4 in cache] == [1, 2]
    assert cache.nbytes == 200
    # Larger than the whole budget: not kept, and nothing else is evicted for it.
    assert not cache.put(state([9] * 4, 251))
    assert len(cache) == 2


def test_configure_shrinks_now_and_zero_states_disables() -> None:
    cache = PrefixCache(max_bytes=1000, max_states=4)
    for i in range(4):
        cache.put(state([i], 100))
    cache.configure(max_bytes=250)
    assert len(cache) == 2 and [3] in cache and [2] in cache
    cache.configure(max_states=0)
    assert len(cache) == 0
    assert not cache.put(state([7], 1))


def test_a_hash_hit_with_other_tokens_is_a_miss() -> None:
    cache = PrefixCache()
    cache.put(state([1, 2, 3], 10))
    # Forge a collision: the same key holding other tokens is never returned for these.
    key = prefix_key([1, 2, 3])
    cache._states[key] = state([4, 5, 6], 10)
    assert cache.get([1, 2, 3]) is None and [1, 2, 3] not in cache


def test_drop_and_clear() -> None:
    cache = PrefixCache()
    cache.put(state([1], 10))
    cache.put(state([2], 10))
    cache.drop([1])
    cache.drop([99])  # not kept: nothing happens
    assert [1] not in cache and [2] in cache
    cache.clear()
    assert len(cache) == 0


@pytest.mark.parametrize(
    ("shared", "prompt_len", "boundary", "cached", "step"),
    [
        (0, 1000, 800, False, "evaluate"),  # first call: evaluate the prefix alone, then save it
        (0, 1000, 800, True, "restore"),  # the context holds another prompt: restore
        (300, 1000, 800, True, "restore"),  # shares a little (the template's opening): restore
        (800, 1000, 800, True, "resident"),  # llama.cpp's own reuse covers it
        (950, 1000, 800, False, "resident"),
        (0, 1000, 100, True, "none"),  # too short to be worth a state
        (0, 800, 800, True, "none"),  # the prefix is the whole prompt: nothing follows it
    ],
)
def test_prefix_step(shared: int, prompt_len: int, boundary: int, cached: bool, step: str) -> None:
    assert prefix_step(shared, prompt_len, boundary, cached, min_tokens=128) == step


def formatter(generation: bool) -> llama_chat_format.Jinja2ChatFormatter:
    return llama_chat_format.Jinja2ChatFormatter(
        template=llama_chat_format.CHATML_CHAT_TEMPLATE,
        eos_token="<|im_end|>",
        bos_token="",
        add_generation_prompt=generation,
    )


@pytest.mark.parametrize("protocol", ["action", "json"])
def test_the_stable_prefix_is_the_rendered_system_block_with_its_tool_list(protocol: ToolProtocol) -> None:
    first = ModelRequest(
        messages=[Message.system("Follow the policy."), Message.user("What is 2+2?")],
        tools=[calculate.openai_schema()],
    )
    later = ModelRequest(
        messages=[*first.messages, Message.assistant("4"), Message.user("And 3+3?")],
        tools=first.tools,
    )
    blocks = []
    for request in (first, later):
        plan = build_plan(request, protocol)
        text, _ = render_prompt(formatter(True), plan)
        block = stable_prefix(formatter(False), plan)
        assert text.startswith(block) and len(text) > len(block)
        assert block.startswith("<|im_start|>system\nFollow the policy.") and block.endswith("<|im_end|>\n")
        assert "calculate" in block  # the tool list is part of it
        assert "What is 2+2" not in block
        blocks.append(block)
    assert blocks[0] == blocks[1]  # the conversation grows behind it


def test_no_system_message_no_stable_prefix() -> None:
    plan = build_plan(ModelRequest(messages=[Message.user("hi")]))
    assert stable_prefix(formatter(False), plan) == ""


def test_each_load_has_its_own_bounded_cache() -> None:
    a = LoadedModel(None, None, threading.Lock(), 0.0, "m.gguf")
    b = LoadedModel(None, None, threading.Lock(), 0.0, "m.gguf")
    assert a.prefix_cache is not b.prefix_cache  # one cache per load, never a process-wide one
    assert a.prefix_cache.max_states == 4 and a.prefix_cache.max_bytes == 256 * 2**20
