"""Request fields the server must not silently get wrong: `response_format` beyond text is refused
(naming the field) rather than ignored, and several text parts of one message keep a line break."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import openai
import pytest
from openai import OpenAI

from agent.models import EchoModel
from agent.runtime import Agent
from agent.server import BackgroundServer, create_app


@pytest.fixture(scope="module")
def client() -> Iterator[OpenAI]:
    agent = Agent(EchoModel(), checkpointer="memory", name="echo")
    with BackgroundServer(create_app({"echo": agent})) as server:
        yield OpenAI(base_url=f"{server.url}/v1", api_key="none", max_retries=0, http_client=httpx.Client(trust_env=False))


@pytest.mark.parametrize("response_format", [
    {"type": "json_object"},
    {"type": "json_schema", "json_schema": {"name": "answer", "schema": {"type": "object", "properties": {}}}},
])
def test_a_json_response_format_is_refused_naming_the_field(client: OpenAI, response_format: dict) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model="echo", messages=[{"role": "user", "content": "hi"}],
                                       response_format=response_format)  # type: ignore[arg-type]
    assert info.value.body["param"] == "response_format"
    assert response_format["type"] in info.value.message and "not supported" in info.value.message


def test_a_text_response_format_is_accepted(client: OpenAI) -> None:
    r = client.chat.completions.create(model="echo", messages=[{"role": "user", "content": "hi"}],
                                       response_format={"type": "text"})
    assert r.choices[0].message.content == "You said: hi"


def test_text_parts_of_one_message_keep_a_line_break(client: OpenAI) -> None:
    r = client.chat.completions.create(model="echo", messages=[{"role": "user", "content": [
        {"type": "text", "text": "part one"}, {"type": "text", "text": "part two"}]}])
    assert r.choices[0].message.content == "You said: part one\npart two"
