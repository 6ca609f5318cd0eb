"""Traces of served turns: a turn is recorded under the thread id its client uses (never the
stored id, which carries a hash of the API key), as one session, with the turn's total usage."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from agent import Agent, tracing
from agent.models import EchoModel
from agent.server import BackgroundServer, create_app, key_id

KEY = "traced-key-123"


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.enable(provider=provider)
    yield exporter
    tracing.disable()


def test_served_turns_carry_the_clients_thread_id_a_session_and_usage(spans: InMemorySpanExporter) -> None:
    agent = Agent(EchoModel(), checkpointer="memory", name="echo")
    with BackgroundServer(create_app({"echo": agent}, api_keys=[KEY])) as server:
        for text in ("one", "two"):
            r = httpx.post(f"{server.url}/v1/chat/completions", trust_env=False,
                           headers={"Authorization": f"Bearer {KEY}", "X-Rein-Thread": "customer-7"},
                           json={"model": "echo", "messages": [{"role": "user", "content": text}]})
            assert r.status_code == 200, r.text
    turns = [s for s in spans.get_finished_spans() if s.name == "invoke_agent echo"]
    chats = [s for s in spans.get_finished_spans() if s.name.startswith("chat ")]
    assert len(turns) == 2 and chats
    for span in turns:
        attrs = dict(span.attributes or {})
        assert attrs["gen_ai.conversation.id"] == "customer-7" and attrs["session.id"] == "customer-7"
        assert attrs["gen_ai.usage.input_tokens"] > 0 and attrs["gen_ai.usage.output_tokens"] > 0
    assert all(dict(s.attributes or {}).get("gen_ai.conversation.id") == "customer-7" for s in chats)
    # The stored id, with the key's hash, appears nowhere in the trace.
    assert not any(key_id(KEY) in str(v) for s in spans.get_finished_spans() for v in (s.attributes or {}).values())
