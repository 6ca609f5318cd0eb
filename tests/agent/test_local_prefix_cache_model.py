"""The prefix-state cache with the real 0.5B model: two long prompts taking turns on one loaded
model evaluate each system block once, and a restored block answers exactly as the block
evaluated afresh. (Not always as with the cache off: there llama.cpp's own prefix reuse splits
the evaluation wherever the previous prompt diverged, and its logits move slightly with the split.)"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest

from agent.messages import Message, ModelRequest, ModelResponse, ModelSettings
from agent.models.local import LocalModel
from agent.models.local_loader import _open_llama
from agent.models.prefix_cache import PrefixCache, restore_state
from tools.builtin import calculate

# Up to a few minutes on a loaded 2-core machine: above the suite-wide 300 s timeout there.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

AGENT_SYSTEM = "You are a store's support agent. Policy:\n" + "\n".join(
    f"- Rule {i}: orders placed on day {i} may be returned within {i + 3} days with a receipt." for i in range(20)
)
USER_SYSTEM = "You play a customer in a chat. Your scenario:\n" + "\n".join(
    f"- Fact {i}: you bought item number {i * 7} and you remember its colour was shade {i}." for i in range(20)
)


def agent_request(question: str) -> ModelRequest:
    return ModelRequest(
        messages=[Message.system(AGENT_SYSTEM), Message.user(question)],
        tools=[calculate.openai_schema()],
        settings=ModelSettings(max_tokens=12, tool_choice="auto"),
    )


def user_request(said: str) -> ModelRequest:
    return ModelRequest(
        messages=[Message.system(USER_SYSTEM), Message.user(said)],
        settings=ModelSettings(max_tokens=12, tool_choice="none"),
    )


TURNS = [
    agent_request("What is 17*23?"),
    user_request("Hello, how can I help you today?"),
    agent_request("Can I return an order from day 4?"),
    user_request("Which item did you buy?"),
]


@pytest.fixture
def counted() -> Iterator[tuple[LocalModel, list[int]]]:
    """A fixed-window model whose llama.cpp context counts the tokens it evaluates."""
    model = LocalModel(n_ctx=2048)
    loaded = model.load()
    llama = loaded.llama
    evaluated: list[int] = []
    original = llama.eval

    def eval_counting(tokens: Any) -> None:
        evaluated.append(len(tokens))
        original(tokens)

    llama.eval = eval_counting
    # This process's cache alone: a state on disk from an earlier session would stand in for
    # the evaluations counted here (test_local_speed_model.py tests the store).
    store, loaded.prefix_cache.store = loaded.prefix_cache.store, None
    try:
        yield model, evaluated
    finally:
        del llama.eval
        loaded.prefix_cache.store = store


def cold(model: LocalModel) -> None:
    llama = model.load().llama
    llama.reset()
    llama._ctx.kv_cache_clear()


def play(model: LocalModel, *, forget: bool = False) -> list[ModelResponse]:
    """The turns in order, from a cold context; forget: every call also starts with an empty
    cache (each system block evaluated afresh, the cache's reference)."""
    cold(model)
    out = []
    for request in TURNS:
        if forget:
            cold(model)
            model.load().prefix_cache.clear()
        out.append(asyncio.run(model.complete(request)))
    return out


def said(responses: list[ModelResponse]) -> list[tuple[str, list[tuple[str, str]]]]:
    return [(r.text, [(c.name, c.arguments) for c in r.tool_calls]) for r in responses]


def test_turn_taking_prompts_evaluate_each_system_block_once(counted: tuple[LocalModel, list[int]]) -> None:
    base, evaluated = counted
    plain = LocalModel(n_ctx=2048, prefix_cache=False)
    cached = LocalModel(n_ctx=2048)
    loaded = base.load()
    assert plain.load() is loaded and cached.load() is loaded  # one load, one cache
    cache, stats = loaded.prefix_cache, loaded.prefix_cache.stats

    # A model with the cache off neither saves nor restores.
    cache.clear()
    cold(plain)
    asyncio.run(plain.complete(TURNS[0]))
    assert len(cache) == 0

    # The reference: every call evaluates its system block afresh (as each switch does without
    # the cache).
    evaluated.clear()
    reference = play(cached, forget=True)
    tokens_reference = sum(evaluated)

    evaluated.clear()
    cache.clear()
    before = (stats.misses, stats.hits)
    with_cache = play(cached)
    tokens_with = sum(evaluated)

    # Restoring a block gives exactly what evaluating it gives: the same greedy output.
    assert said(with_cache) == said(reference)
    # Each system block was evaluated once and restored once.
    assert (stats.misses - before[0], stats.hits - before[1]) == (2, 2)
    assert len(cache) == 2
    blocks = [len(s.tokens) for s in cache._states.values()]
    assert all(n > 200 for n in blocks)
    # Exactly the two restored blocks were not evaluated again.
    assert tokens_reference - tokens_with == sum(blocks)


def test_a_state_loads_into_a_larger_context_and_a_too_small_one_refuses_it() -> None:
    model = LocalModel(n_ctx=1024)
    loaded = model.load()
    llama = loaded.llama
    cache = PrefixCache(min_tokens=16)
    text = f"<|im_start|>system\n{USER_SYSTEM}<|im_end|>\n"
    prefix = llama.tokenize(text.encode(), add_bos=False, special=True)
    prompt = prefix + llama.tokenize(b"<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n", add_bos=False, special=True)

    def answer(ll: Any) -> str:
        return "".join(c["choices"][0]["text"] for c in ll.create_completion(prompt=prompt, max_tokens=8, temperature=0.0, stream=True))

    with loaded.lock:
        llama.reset()
        llama._ctx.kv_cache_clear()
        assert cache.prepare(llama, prompt, len(prefix)) == "evaluate"
        reference = answer(llama)
        saved = cache.get(prefix)
        assert saved is not None and saved.n_ctx == 1024
    larger = _open_llama(loaded.path, 2048, loaded.n_threads)
    small = _open_llama(loaded.path, 256, loaded.n_threads)
    try:
        assert cache.prepare(larger, prompt, len(prefix)) == "restore"
        assert larger.n_tokens == len(prefix)
        assert answer(larger) == reference
        assert not restore_state(small, saved) and small.n_tokens == 0
    finally:
        larger.close()
        small.close()
