"""docs/examples/embed_fastapi.py: rein mounted inside another FastAPI app, driven by the openai client."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import httpx
import openai
import pytest
from openai import OpenAI

from agent.models import ScriptedModel, call
from agent.server import BackgroundServer, key_id, storage_id

EXAMPLE = Path(__file__).resolve().parents[2] / "docs" / "examples" / "embed_fastapi.py"


def load_example():
    spec = importlib.util.spec_from_file_location("embed_fastapi_example", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_mounted_agent_answers_next_to_the_parent_routes(tmp_path: Path) -> None:
    example = load_example()
    model = ScriptedModel([call("order_status", {"order_id": "A-1"}), "Order A-1 has shipped."])
    shop = example.build_app(db_path=str(tmp_path / "shop.sqlite"), model=model, api_keys=["k"])
    rein_app = next(r.app for r in shop.routes if getattr(r, "path", None) == "/rein")
    with BackgroundServer(shop) as server:
        assert httpx.get(f"{server.url}/orders/A-2", trust_env=False).json() == {"id": "A-2", "status": "processing"}
        client = OpenAI(base_url=f"{server.url}/rein/v1", api_key="k", max_retries=0,
                        http_client=httpx.Client(trust_env=False))
        assert [m.id for m in client.models.list()] == ["support"]
        r = client.chat.completions.create(model="support", messages=[{"role": "user", "content": "Where is A-1?"}],
                                           extra_headers={"X-Rein-Thread": "customer-7"})
        assert r.choices[0].message.content == "Order A-1 has shipped."
        assert r.model_extra["rein"]["thread_id"] == "customer-7"
        with pytest.raises(openai.AuthenticationError):
            OpenAI(base_url=f"{server.url}/rein/v1", api_key="nope", max_retries=0,
                   http_client=httpx.Client(trust_env=False)).models.list()
        history = _history(rein_app)
    # The tool ran on the server: its result is in the thread, and the model saw it.
    assert [(m.role, m.text) for m in history] == [
        ("user", "Where is A-1?"), ("assistant", ""), ("tool", "shipped"), ("assistant", "Order A-1 has shipped.")]
    assert model.requests[1].messages[-1].text == "shipped"
    model.assert_done()
    assert rein_app.state.rein.closing  # the parent's lifespan ran rein's shutdown


def _history(rein_app) -> list:
    agent = rein_app.state.rein.agents["support"]
    try:
        return agent.history(storage_id("support", "customer-7", key_id("k")))
    finally:
        agent.close()
