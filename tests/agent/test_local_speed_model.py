"""Speed-ups of the embedded model that must not change what it says, on the real 0.5B model:
greedy decoding that checks the best token against the grammar first writes exactly what
llama.cpp's full grammar mask writes, and a prefix state saved to disk by one process is loaded,
not evaluated, by the next, which then answers exactly as the first did."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from agent.messages import Message, ModelRequest, ModelResponse, ModelSettings
from agent.models.local import LocalModel
from agent.models.prefix_store import PrefixStore, context_signature
from tools.builtin import calculate

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

SYSTEM = "You are a calculator's assistant. Rules:\n" + "\n".join(
    f"- Rule {i}: answers about sums above {i * 100} must be checked with the calculate tool." for i in range(12)
)


def request(question: str, tool_choice: str = "auto", max_tokens: int = 40) -> ModelRequest:
    return ModelRequest(
        messages=[Message.system(SYSTEM), Message.user(question)],
        tools=[calculate.openai_schema()],
        settings=ModelSettings(max_tokens=max_tokens, tool_choice=tool_choice),  # type: ignore[arg-type]
    )


REQUESTS = [
    request("What is 17*23?"),
    request("Compute 2**10 minus 7, please.", "required"),
    request("Say hello in French.", "none", 16),  # an answer under the protocol-free grammar
]


def said(r: ModelResponse) -> tuple[str, list[tuple[str, str]]]:
    return r.text, [(c.name, c.arguments) for c in r.tool_calls]


def cold(model: LocalModel) -> None:
    llama = model.load().llama
    llama.reset()
    llama._ctx.kv_cache_clear()


def test_checking_the_best_token_first_writes_what_the_full_mask_writes() -> None:
    outputs = {}
    for fast in (False, True):
        model = LocalModel(n_ctx=2048, fast_grammar=fast)
        loaded = model.load()
        loaded.prefix_cache.clear()
        loaded.calls.clear()
        answers = []
        for r in REQUESTS:
            cold(model)  # every request evaluated the same way in both passes
            answers.append(said(asyncio.run(model.complete(r))))
        outputs[fast] = answers
        constrained = [c for c in loaded.calls if c.generated_tokens]
        masks = sum(c.grammar_masks for c in constrained)
        generated = sum(c.generated_tokens for c in constrained)
        if fast:
            assert 0 < masks < generated / 2  # mostly one check per token
        else:
            assert masks == generated  # every token masked the whole vocabulary
    assert outputs[True] == outputs[False]
    assert outputs[True][0][1][0][0] == "calculate"


CHILD = """
import asyncio, json, sys
sys.path.insert(0, sys.argv[1])
from tests.agent.test_local_speed_model import REQUESTS, said
from agent.models.local import LocalModel
model = LocalModel(n_ctx=2048)
answer = asyncio.run(model.complete(REQUESTS[0]))
stats = model.load().prefix_cache.stats
print(json.dumps({"said": said(answer), "disk_hits": stats.disk_hits, "misses": stats.misses}))
"""


def test_a_prefix_saved_by_one_process_is_loaded_by_the_next(tmp_path: Path) -> None:
    model = LocalModel(n_ctx=2048)
    loaded = model.load()
    cache = loaded.prefix_cache
    kept = cache.store
    cache.store = PrefixStore(tmp_path, context_signature(loaded.llama))
    try:
        cache.clear()
        cold(model)
        saves = cache.stats.disk_saves
        first = said(asyncio.run(model.complete(REQUESTS[0])))
        assert cache.stats.disk_saves == saves + 1
        assert len(list(tmp_path.glob("*.kvstate"))) == 1
    finally:
        cache.store = kept
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "REIN_PREFIX_STORE": str(tmp_path)}
    out = subprocess.run(
        [sys.executable, "-c", CHILD, str(root)], capture_output=True, text=True, env=env, timeout=600, check=True
    )
    child = json.loads(out.stdout.strip().splitlines()[-1])
    assert child["disk_hits"] == 1 and child["misses"] == 0
    assert [child["said"][0], [tuple(c) for c in child["said"][1]]] == [first[0], first[1]]
