"""Retried requests never run a turn twice: the real openai SDK's own retries, Idempotency-Key
resends after a SIGKILL and a restart, and a chat UI that re-renders the assistant's wording."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import openai
import pytest
from openai import OpenAI

from agent.messages import ModelRequest
from agent.models import FunctionModel, call
from agent.runtime import Agent
from agent.server import BackgroundServer, create_app, storage_id
from tools import ToolKind, tool

ROOT = Path(__file__).parents[2]
PAYMENTS: list[str] = []


@tool(kind=ToolKind.WRITE, timeout_s=None)
async def pay(ref: str) -> str:
    """Make a payment (slower than the client's timeout).

    Args:
        ref: The payment reference.
    """
    await asyncio.sleep(3)
    PAYMENTS.append(ref)
    return f"paid {ref}"


def cashier(request: ModelRequest) -> object:
    last = request.messages[-1]
    if last.role == "tool":
        return f"Done: {last.text}."
    if last.text.startswith("pay "):
        ref = last.text.split()[1]
        return call("pay", {"ref": ref}, id=f"call-{ref}")
    return f"Hello, you said {last.text}"


@pytest.fixture
def cashier_server(tmp_path: Path):
    PAYMENTS.clear()
    agent = Agent(FunctionModel(cashier), [pay], checkpointer=str(tmp_path / "threads.sqlite"))
    with BackgroundServer(create_app({"cashier": agent})) as server:
        yield server, agent


def users(agent: Agent, thread: str) -> list[str]:
    async def read() -> list[str]:
        return [m.text for m in await agent.ahistory(storage_id("cashier", thread)) if m.role == "user"]

    return asyncio.run(read())


@pytest.mark.parametrize("keyed", [False, True], ids=["sdk-retry-count", "idempotency-key"])
def test_the_openai_sdks_automatic_retries_write_once(cashier_server, keyed: bool) -> None:
    server, agent = cashier_server
    thread = f"pay-{keyed}"
    headers = {"X-Rein-Thread": thread}
    client = OpenAI(base_url=server.url + "/v1", api_key="none", timeout=1.0, max_retries=2)
    first = client.chat.completions.create(model="cashier", messages=[{"role": "user", "content": "hi"}],
                                           extra_headers=headers)
    assert first.choices[0].message.content == "Hello, you said hi"
    if keyed:
        headers = {**headers, "Idempotency-Key": "order-17"}
    # The turn takes 3 s, the client gives up after 1 s and retries twice by itself.
    try:
        answer = client.chat.completions.create(model="cashier", messages=[{"role": "user", "content": "pay PAY-1"}],
                                                extra_headers=headers).choices[0].message.content
    except openai.APITimeoutError:
        answer = None
    deadline = time.monotonic() + 20
    while not PAYMENTS and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(1.0)  # room for a second write, were a retry to run the turn again
    assert PAYMENTS == ["PAY-1"]
    assert users(agent, thread) == ["hi", "pay PAY-1"]
    # One more attempt of the same request (as after the SDK gave up) returns the stored answer.
    again = httpx.post(server.url + "/v1/chat/completions", timeout=30,
                       headers={**headers, "X-Stainless-Retry-Count": "3"},
                       json={"model": "cashier", "messages": [{"role": "user", "content": "pay PAY-1"}]})
    assert again.status_code == 200, again.text
    assert again.json()["choices"][0]["message"]["content"] == "Done: paid PAY-1."
    assert again.json()["rein"]["action"] == "replay"
    assert answer in (None, "Done: paid PAY-1.")
    assert PAYMENTS == ["PAY-1"]


def test_a_new_request_with_the_same_words_is_a_new_turn(cashier_server) -> None:
    server, agent = cashier_server
    post = lambda **kw: httpx.post(server.url + "/v1/chat/completions", timeout=30, **kw)  # noqa: E731
    body = {"model": "cashier", "messages": [{"role": "user", "content": "yes"}]}
    post(headers={"X-Rein-Thread": "t"}, json={"model": "cashier", "messages": [{"role": "user", "content": "hi"}]})
    assert post(headers={"X-Rein-Thread": "t"}, json=body).json()["rein"]["action"] == "append"
    # No key and no retry count: the user said "yes" again.
    assert post(headers={"X-Rein-Thread": "t"}, json=body).json()["rein"]["action"] == "append"
    # Different keys are different requests, even with the same words.
    for key in ("a", "b"):
        assert post(headers={"X-Rein-Thread": "t", "Idempotency-Key": key}, json=body).json()["rein"]["action"] == "append"
    assert users(agent, "t") == ["hi"] + ["yes"] * 4
    assert post(headers={"X-Rein-Thread": "t", "Idempotency-Key": "b"}, json=body).json()["rein"]["action"] == "replay"
    # A key reused for other words is refused before anything runs.
    reused = post(headers={"X-Rein-Thread": "t", "Idempotency-Key": "a"},
                  json={"model": "cashier", "messages": [{"role": "user", "content": "no"}]})
    assert reused.status_code == 422 and reused.json()["error"]["code"] == "idempotency_key_reused"
    bad = post(headers={"X-Rein-Thread": "t", "Idempotency-Key": "x" * 300}, json=body)
    assert bad.status_code == 400 and "Idempotency-Key" in bad.json()["error"]["message"]
    assert users(agent, "t") == ["hi"] + ["yes"] * 4


def test_a_resend_after_sigkill_and_restart_writes_once(tmp_path: Path) -> None:
    db, ledger, marker = tmp_path / "threads.sqlite", tmp_path / "ledger.txt", tmp_path / "paid"
    worker = [sys.executable, "-m", "tests.agent.retry_worker", str(db), str(ledger), str(marker)]
    headers = {"X-Rein-Thread": "crash", "Idempotency-Key": "order-99"}
    body = {"model": "cashier", "messages": [{"role": "user", "content": "pay PAY-9"}]}

    proc = subprocess.Popen(worker, cwd=ROOT, stdout=subprocess.PIPE, text=True)
    try:
        url = _started(proc)
        with httpx.Client(base_url=url, timeout=60, trust_env=False) as client, ThreadPoolExecutor(1) as pool:
            r = client.post("/v1/chat/completions", headers={"X-Rein-Thread": "crash"},
                            json={"model": "cashier", "messages": [{"role": "user", "content": "hi"}]})
            assert r.status_code == 200, r.text
            pending = pool.submit(client.post, "/v1/chat/completions", headers=headers, json=body)
            deadline = time.monotonic() + 30
            while not marker.exists():  # the write has committed; the answer never comes
                assert time.monotonic() < deadline and not pending.done(), "the payment never committed"
                time.sleep(0.02)
            os.kill(proc.pid, signal.SIGKILL)
            with pytest.raises(httpx.HTTPError):
                pending.result(30)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(10)
    assert ledger.read_text().split() == ["PAY-9"]

    proc = subprocess.Popen([*worker, "--answer"], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    try:
        url = _started(proc)
        with httpx.Client(base_url=url, timeout=60, trust_env=False) as client:
            r = client.post("/v1/chat/completions", headers=headers, json=body)
            assert r.status_code == 200, r.text
            assert r.json()["choices"][0]["message"]["content"] == "Done: paid PAY-9."
            # And again: the stored answer, no third turn.
            r = client.post("/v1/chat/completions", headers=headers, json=body)
            assert r.json()["rein"]["action"] == "replay"
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
    assert ledger.read_text().split() == ["PAY-9"]
    reader = Agent(FunctionModel(cashier), [pay], checkpointer=str(db))
    assert asyncio.run(reader.ahistory(storage_id("cashier", "crash")))[-1].text == "Done: paid PAY-9."
    thread = [m.text for m in asyncio.run(reader.ahistory(storage_id("cashier", "crash"))) if m.role == "user"]
    assert thread == ["hi", "pay PAY-9"]


def _started(proc: subprocess.Popen[str]) -> str:
    line = proc.stdout.readline() if proc.stdout else ""
    assert line.startswith("http://"), line
    return line.strip()


def strip_markdown(text: str) -> str:
    """What a chat UI that renders markdown and trims whitespace sends back as the assistant's message."""
    text = re.sub(r"[*_`#>]", "", text)
    return " ".join(text.split())


def test_a_ui_that_rerenders_replies_keeps_one_thread_for_100_turns(tmp_path: Path) -> None:
    def writer(request: ModelRequest) -> str:
        n = sum(1 for m in request.messages if m.role == "user")
        return f"## Answer {n}\n\n**Bold** point and `code`  \n\n- item _one_\n- item two\n> quoted {request.messages[-1].text}"

    agent = Agent(FunctionModel(writer), [], checkpointer=str(tmp_path / "threads.sqlite"))
    messages: list[dict[str, str]] = [{"role": "system", "content": "be brief"}]
    with BackgroundServer(create_app({"writer": agent})) as server, httpx.Client(base_url=server.url, timeout=30) as client:
        for turn in range(100):
            messages.append({"role": "user", "content": f"question {turn}"})
            r = client.post("/v1/chat/completions", json={"model": "writer", "messages": messages})
            assert r.status_code == 200, (turn, r.text)
            rein = r.json()["rein"]
            assert rein["forked_from"] is None and rein["action"] == "append", (turn, rein)
            reply = r.json()["choices"][0]["message"]["content"]
            assert reply.startswith(f"## Answer {turn + 1}")
            messages.append({"role": "assistant", "content": strip_markdown(reply)})
    assert json.dumps(rein["thread_id"]).startswith('"conv-')


def test_a_streamed_retry_replays_the_answer(cashier_server) -> None:
    server, agent = cashier_server
    client = OpenAI(base_url=server.url + "/v1", api_key="none", max_retries=0)
    headers = {"X-Rein-Thread": "s", "Idempotency-Key": "stream-1"}
    client.chat.completions.create(model="cashier", messages=[{"role": "user", "content": "hi"}],
                                   extra_headers={"X-Rein-Thread": "s"})
    for expected in ("append", "replay"):
        stream = client.chat.completions.create(model="cashier", messages=[{"role": "user", "content": "pay PAY-2"}],
                                                extra_headers=headers, stream=True)
        chunks = list(stream)
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        assert text == "Done: paid PAY-2."
        assert chunks[-1].model_extra["rein"]["action"] == expected
    assert PAYMENTS == ["PAY-2"]
    assert users(agent, "s") == ["hi", "pay PAY-2"]
