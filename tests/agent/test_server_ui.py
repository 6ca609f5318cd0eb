"""`rein serve --ui`: the chat page and its assets, the conversations and thread endpoints it reads
(per tenant), and the page itself driven end to end in headless Chromium (tests/js/ui/e2e.mjs)."""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest
from langgraph.checkpoint.base.id import uuid6
from langgraph.checkpoint.memory import InMemorySaver

from agent.cli.serve import add_arguments, worker_argv
from agent.messages import ModelRequest, ModelResponse
from agent.models import FunctionModel, StreamItem, TextDelta, call
from agent.plugin_api import InterventionContext, Plant
from agent.runtime import Agent
from agent.server import BackgroundServer, create_app
from agent.server.ui import checkpoint_time
from tests.js_support import run_node
from tools import ToolKind, tool

KEYS = {"alice-key": "alice", "alice-phone": "alice", "bob-key": "bob"}
ORDER_REPLY = "Your order W1 has shipped and arrives on Friday."
PLAN = "The user asks about an order: look it up before answering."
CHROMIUM = "/usr/bin/chromium"


@tool
def lookup_order(order_id: str) -> str:
    """Look an order up.

    Args:
        order_id: The order's id.
    """
    return f"order {order_id}: shipped, arrives Friday"


CANCELLED: list[str] = []


@tool(kind=ToolKind.WRITE, needs_approval=True)
def cancel_order(order_id: str) -> str:
    """Cancel an order.

    Args:
        order_id: The order to cancel.
    """
    CANCELLED.append(order_id)
    return f"{order_id} cancelled"


def shop(request: ModelRequest) -> ModelResponse | str:
    """Looks an order up when asked about one, cancels one (after approval) when told to
    ("cancel ID"), echoes anything else."""
    last = request.messages[-1]
    if last.role == "tool" and last.name == "lookup_order":
        return ORDER_REPLY
    if last.role == "tool" and last.name == "cancel_order":
        return f"Done: {last.text}"
    user = next(m.text for m in reversed(request.messages) if m.role == "user")
    words = user.split()
    if words[0] == "cancel":
        return call("cancel_order", {"order_id": words[1]}, text="Let me cancel that.")
    if "order" in user:
        return call("lookup_order", {"order_id": "W1"})
    return f"You said: {user}"


def broken(request: ModelRequest) -> str:
    raise RuntimeError("the model backend is down")


class Typist(FunctionModel):
    """Streams its answers a word at a time, so a page shows them growing."""

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamItem]:
        response = await self.complete(request)
        for i, word in enumerate(response.text.split(" ") if response.text else []):
            yield TextDelta(word if i == 0 else " " + word)
            await asyncio.sleep(0.03)
        yield response


class OrderPlanner:
    """Plants a plan when the user mentions an order."""

    name = "planner"

    async def before_turn(self, ctx: InterventionContext) -> Plant | None:
        last = ctx.dialogue[-1].text if ctx.dialogue else ""
        return Plant(PLAN, record={"reason": "order question"}) if "order" in last else None


def agents(db: Path) -> dict[str, Agent]:
    spec = f"sqlite:{db}"
    return {
        "shop": Agent(Typist(shop), [lookup_order, cancel_order], checkpointer=spec, name="shop", interventions=[OrderPlanner()]),
        "broken": Agent(FunctionModel(broken), checkpointer=spec, name="broken"),
    }


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    app = create_app(agents(tmp_path_factory.mktemp("ui") / "threads.sqlite"), api_keys=KEYS, ui=True)
    with BackgroundServer(app) as server:
        yield server.url


def get(url: str, key: str | None = "alice-key") -> httpx.Response:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    return httpx.get(url, headers=headers, trust_env=False, timeout=30)


def chat(url: str, key: str, thread: str, text: str, model: str = "shop") -> httpx.Response:
    return httpx.post(
        f"{url}/v1/chat/completions", trust_env=False, timeout=30,
        headers={"Authorization": f"Bearer {key}", "X-Rein-Thread": thread},
        json={"model": model, "messages": [{"role": "user", "content": text}]},
    )


def test_the_page_and_its_assets_are_served_with_a_strict_policy(served: str) -> None:
    page = get(f"{served}/", key=None)  # the page itself needs no key; it asks for one
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert "ui/app.js" in page.text and "ui/app.css" in page.text
    assert "default-src 'none'" in page.headers["content-security-policy"]
    # Every asset the page names ships in the package: nothing comes from elsewhere.
    assert "http://" not in page.text and "https://" not in page.text
    assets = [("app.js", "text/javascript"), ("api.js", "text/javascript"), ("turn_view.js", "text/javascript"),
              ("app.css", "text/css")]
    for name, kind in assets:
        r = get(f"{served}/ui/{name}", key=None)
        assert r.status_code == 200 and r.headers["content-type"].startswith(kind) and r.content
        assert "https://" not in r.text
    assert get(f"{served}/ui/../ui.py", key=None).status_code == 404
    assert get(f"{served}/ui/nothing.js", key=None).status_code == 404


def test_without_ui_there_is_no_page() -> None:
    app = create_app({"echo": Agent(FunctionModel(shop), checkpointer="memory", name="echo")})
    with BackgroundServer(app) as server:
        assert get(f"{server.url}/", key=None).status_code == 404
        assert get(f"{server.url}/ui/app.js", key=None).status_code == 404
        assert get(f"{server.url}/ui/api/threads", key=None).status_code == 404


def test_conversations_are_listed_per_tenant_newest_first(served: str) -> None:
    assert chat(served, "alice-key", "first", "hello").status_code == 200
    assert chat(served, "alice-phone", "second", "hi again").status_code == 200
    assert chat(served, "bob-key", "bobs", "hello").status_code == 200
    assert chat(served, "bob-key", "first", "same id, other tenant").status_code == 200

    alice = get(f"{served}/ui/api/threads", "alice-key").json()["data"]
    mine = [(t["agent"], t["thread_id"]) for t in alice if t["thread_id"] in ("first", "second", "bobs")]
    assert mine == [("shop", "second"), ("shop", "first")]  # both of alice's keys, newest first
    assert all(isinstance(t["updated_at"], float) for t in alice)
    bob = {(t["agent"], t["thread_id"]) for t in get(f"{served}/ui/api/threads", "bob-key").json()["data"]}
    assert ("shop", "bobs") in bob and ("shop", "first") in bob and ("shop", "second") not in bob

    denied = get(f"{served}/ui/api/threads", key=None)
    assert denied.status_code == 401 and denied.json()["error"]["code"] == "invalid_api_key"
    assert get(f"{served}/ui/api/threads", "wrong").status_code == 401


def test_a_thread_shows_its_plants_tool_calls_and_results(served: str) -> None:
    r = chat(served, "alice-key", "order-thread", "Where is my order?")
    assert r.status_code == 200 and r.json()["choices"][0]["message"]["content"] == ORDER_REPLY

    messages = get(f"{served}/ui/api/threads/shop/order-thread", "alice-key").json()["messages"]
    assert messages[0] == {"role": "user", "text": "Where is my order?"}
    planted = [m for m in messages if m.get("planted_by")]
    assert planted and planted[0]["planted_by"] == "planner" and planted[0]["planted_reasoning"] == PLAN
    calls = [c for m in messages if not m.get("planted_by") for c in m.get("tool_calls", [])]
    assert [c["name"] for c in calls] == ["lookup_order"]
    result = next(m for m in messages if m["role"] == "tool" and m.get("call_id") == calls[0]["id"])
    assert result["text"] == "order W1: shipped, arrives Friday" and result["is_error"] is False
    assert messages[-1]["role"] == "assistant" and messages[-1]["text"] == ORDER_REPLY

    # Another tenant naming the same thread reaches its own (empty) thread, not alice's.
    assert get(f"{served}/ui/api/threads/shop/order-thread", "bob-key").json()["messages"] == []
    assert get(f"{served}/ui/api/threads/nope/order-thread", "alice-key").status_code == 404


def test_a_paused_thread_shows_the_calls_awaiting_approval(served: str) -> None:
    paused = chat(served, "alice-key", "paused", "cancel W5").json()
    assert paused["choices"][0]["finish_reason"] == "tool_calls"
    call_id = paused["rein"]["approval"]["pending"][0]["id"]
    stored = get(f"{served}/ui/api/threads/shop/paused", "alice-key").json()
    assert stored["pending"] == [{"id": call_id, "name": "cancel_order", "arguments": '{"order_id": "W5"}', "reason": None}]
    assert stored["messages"][-1]["tool_calls"][0]["id"] == call_id
    assert get(f"{served}/ui/api/threads/shop/paused", "bob-key").json()["pending"] == []

    # What the page sends for the Approve button: a tool message holding the decision.
    decided = httpx.post(
        f"{served}/v1/chat/completions", trust_env=False, timeout=30,
        headers={"Authorization": "Bearer alice-key", "X-Rein-Thread": "paused"},
        json={"model": "shop", "messages": [{"role": "tool", "tool_call_id": call_id, "content": '{"approved": true}'}]},
    )
    assert decided.status_code == 200 and decided.json()["choices"][0]["message"]["content"] == "Done: W5 cancelled"
    assert get(f"{served}/ui/api/threads/shop/paused", "alice-key").json()["pending"] == []


def test_an_open_server_lists_the_threads_of_its_agents_only(tmp_path: Path) -> None:
    # Memory threads (the checkpointer's generic listing), and an agent named inside another's namespace.
    saver = InMemorySaver()
    named = {n: Agent(FunctionModel(shop), checkpointer=saver, name=n) for n in ("a", "a/b")}
    with BackgroundServer(create_app(named, ui=True)) as server:
        for model, thread in (("a", "t1"), ("a/b", "t2")):
            r = httpx.post(f"{server.url}/v1/chat/completions", trust_env=False, timeout=30,
                           headers={"X-Rein-Thread": thread},
                           json={"model": model, "messages": [{"role": "user", "content": "hi"}]})
            assert r.status_code == 200
        listed = {(t["agent"], t["thread_id"]) for t in get(f"{server.url}/ui/api/threads", key=None).json()["data"]}
    # Agent "a" lists the ids under "a/", and those under "a/b/" belong to agent "a/b".
    assert listed == {("a", "t1"), ("a/b", "t2")}


def test_checkpoint_ids_tell_when_they_were_written() -> None:
    assert abs((checkpoint_time(str(uuid6())) or 0) - time.time()) < 5
    assert checkpoint_time("not-a-uuid") is None


def test_rein_serve_has_a_ui_flag(tmp_path: Path) -> None:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = parser.parse_args(["--ui"])
    assert args.ui and "--ui" in worker_argv(args)
    assert not parser.parse_args([]).ui
    done = subprocess.run([sys.executable, "-m", "agent.cli", "serve", "--help"], capture_output=True, text=True, timeout=60)
    assert "--ui" in done.stdout


# --- the page in a browser -------------------------------------------------------------------


def artefacts(tmp_path: Path) -> Path:
    """Where the browser test's screenshots go: $REIN_TEST_ARTIFACTS/ui when set (CI keeps it)."""
    root = os.environ.get("REIN_TEST_ARTIFACTS")
    folder = Path(root) / "ui" if root else tmp_path / "screenshots"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def test_the_page_in_chromium_streams_an_answer_with_its_tools_and_plants(served: str, tmp_path: Path) -> None:
    if shutil.which(CHROMIUM) is None:
        pytest.skip(f"the browser test needs Debian's chromium at {CHROMIUM} (apt-get install chromium)")
    shots = artefacts(tmp_path)
    print(f"screenshots: {shots}")
    env = {**os.environ, "CHROMIUM": CHROMIUM}
    seen = run_node("ui", "e2e.mjs", served, "bob-key", str(shots), env=env, timeout=180)

    assert seen["needed_key"] is True  # the page asked for the key before anything else
    assert seen["agents"] == ["shop", "broken"]
    # The answer grew in the page as it streamed, then settled on the committed reply.
    assert seen["answer"] == ORDER_REPLY
    assert len(seen["partials"]) >= 3 and all(ORDER_REPLY.startswith(p) for p in seen["partials"])
    assert seen["plant"] == PLAN and "planner" in seen["plant_label"]
    assert seen["mode"].startswith("mode: agentic")
    assert seen["tools_summary"] == "1 tool call"
    assert seen["tool_name"] == "lookup_order" and seen["tool_result"] == "order W1: shipped, arrives Friday"
    assert seen["tools_folded"] is True  # closed until the user opens it
    # After a reload the key is remembered in the tab, and the conversation is listed and reopens.
    assert seen["listed"] and seen["reopened_answer"] == ORDER_REPLY
    # A gated call waits for the user; approved, it runs and the answer goes on; rejected, it never runs.
    assert seen["approval_prompt"] == 'Approval needed: cancel_order({"order_id": "W7"})'
    assert seen["approved_result"] == "W7 cancelled" and seen["approved_answer"] == "Let me cancel that.\n\nDone: W7 cancelled"
    assert "wrong order" in seen["rejected_result"] and seen["rejected_answer"].startswith("Let me cancel that.\n\nDone: ")
    assert "W7" in CANCELLED and "W8" not in CANCELLED
    # A failing model shows the server's error text as it is.
    assert "the agent's model failed" in seen["error"] and "502" in seen["error"]
    for name in seen["screenshots"]:
        assert (shots / name).stat().st_size > 1000
