"""The A2A endpoint driven by a2a-sdk's own client (card resolver, client factory, auth
interceptor) over loopback HTTP, on a real server and SQLite database."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest

pytest.importorskip("a2a", reason="needs the a2a extra")

from a2a.client import (  # noqa: E402  (after the importorskip)
    A2ACardResolver,
    AgentCardResolutionError,
    AuthInterceptor,
    Client,
    ClientCallContext,
    ClientConfig,
    ClientFactory,
    CredentialService,
)
from a2a.helpers import get_data_parts, new_data_part  # noqa: E402
from a2a.types.a2a_pb2 import (  # noqa: E402
    GetTaskRequest,
    Message,
    Part,
    Role,
    SendMessageRequest,
    StreamResponse,
    Task,
    TaskState,
)
from a2a.utils.errors import TaskNotFoundError  # noqa: E402

from agent.messages import ModelRequest  # noqa: E402
from agent.models import FunctionModel, call  # noqa: E402
from agent.models.base import StreamItem, TextDelta  # noqa: E402
from agent.runtime import Agent  # noqa: E402
from agent.server import BackgroundServer, create_app, key_id, storage_id  # noqa: E402
from tools import ToolKind, tool  # noqa: E402

KEYS = ["a2a-key-1", "a2a-key-2"]
CANCELLED: list[str] = []


@tool(kind=ToolKind.WRITE, needs_approval=True)
def cancel_order(order_id: str) -> str:
    """Cancel an order.

    Args:
        order_id: The order to cancel.
    """
    CANCELLED.append(order_id)
    return f"{order_id} cancelled"


def clerk(request: ModelRequest) -> object:
    """Cancels the order named after "cancel" (a call that waits for approval), then reports."""
    last = request.messages[-1]
    if last.role == "tool":
        return f"Done: {last.text}."
    order = last.text.split()[-1]
    return call("cancel_order", {"order_id": order}, id=f"call-{order}", text="Let me cancel that.")


def counted(request: ModelRequest) -> str:
    """Numbers its answers by the user messages it sees, so a continued thread shows."""
    users = sum(1 for m in request.messages if m.role == "user")
    return f"[{users}] {request.messages[-1].text}"


def broken(request: ModelRequest) -> str:
    raise RuntimeError("model backend unavailable")


class Spelled(FunctionModel):
    """Streams its answer word by word, a pause between words, so the client sees several chunks."""

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamItem]:
        response = await self.complete(request)
        words = response.text.split(" ")
        for i, word in enumerate(words):
            await asyncio.sleep(0.02)
            yield TextDelta(word if i == 0 else " " + word)
        yield response


class Served:
    def __init__(self, tmp: Path) -> None:
        spec = f"sqlite:{tmp / 'threads.sqlite'}"
        self.agents = {
            "bot": Agent(Spelled(counted), checkpointer=spec, name="bot"),
            "broken": Agent(FunctionModel(broken), checkpointer=spec, name="broken"),
            "clerk": Agent(FunctionModel(clerk), [cancel_order], checkpointer=spec, name="clerk"),
        }
        self.server = BackgroundServer(create_app(self.agents, api_keys=KEYS)).start()
        self.url = self.server.url

    def users(self, agent: str, context_id: str, key: str = KEYS[0]) -> list[str]:
        """The user messages of the thread a context id names, as the key's tenant stores it."""
        history = self.agents[agent].history(storage_id(agent, context_id, key_id(key)))
        return [m.text for m in history if m.role == "user"]

    def close(self) -> None:
        self.server.stop()
        for agent in self.agents.values():
            agent.close()


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    s = Served(tmp_path_factory.mktemp("a2a"))
    yield s
    s.close()


class Key(CredentialService):
    """Hands the AuthInterceptor one API key for the card's bearer scheme."""

    def __init__(self, key: str) -> None:
        self.key = key

    async def get_credentials(self, security_scheme_name: str, context: ClientCallContext | None) -> str | None:
        return self.key


def http(key: str | None = KEYS[0]) -> httpx.AsyncClient:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    return httpx.AsyncClient(trust_env=False, timeout=30, headers=headers)


async def connect(url: str, agent: str = "bot", key: str = KEYS[0], streaming: bool = False) -> Client:
    """A client from the agent's card, fetched with the key; its calls carry the key through the
    SDK's AuthInterceptor, which reads the card's security scheme."""
    async with http(key) as fetch:
        card = await A2ACardResolver(fetch, f"{url}/a2a/{agent}/").get_agent_card()
    config = ClientConfig(streaming=streaming, httpx_client=http(None))
    return ClientFactory(config).create(card, interceptors=[AuthInterceptor(Key(key))])


def user_message(text: str, context_id: str | None = None) -> SendMessageRequest:
    message = Message(role=Role.ROLE_USER, message_id=uuid.uuid4().hex, parts=[Part(text=text)])
    if context_id:
        message.context_id = context_id
    return SendMessageRequest(message=message)


async def send(client: Client, text: str, context_id: str | None = None, request: SendMessageRequest | None = None) -> Task:
    events = [e async for e in client.send_message(request or user_message(text, context_id))]
    assert len(events) == 1 and events[0].HasField("task"), events
    return events[0].task


def answer(task: Task) -> str:
    return "".join(p.text for a in task.artifacts for p in a.parts)


async def test_the_card_names_the_agent_its_endpoint_and_the_bearer_scheme(served: Served) -> None:
    async with http() as fetch:
        card = await A2ACardResolver(fetch, f"{served.url}/a2a/bot/").get_agent_card()
    assert card.name == "bot"
    assert {i.url for i in card.supported_interfaces} == {f"{served.url}/a2a/bot/"}
    assert {i.protocol_version for i in card.supported_interfaces} == {"1.0", "0.3"}
    assert card.capabilities.streaming
    assert card.security_schemes["bearer"].http_auth_security_scheme.scheme == "Bearer"
    assert [list(r.schemes) for r in card.security_requirements] == [["bearer"]]


async def test_send_answers_and_tasks_get_returns_the_task_afterwards(served: Served) -> None:
    client = await connect(served.url)
    task = await send(client, "hello there")
    assert task.status.state == TaskState.TASK_STATE_COMPLETED
    assert answer(task) == "[1] hello there"
    got = await client.get_task(GetTaskRequest(id=task.id))
    assert got.status.state == TaskState.TASK_STATE_COMPLETED
    assert answer(got) == "[1] hello there"
    assert [p.text for m in got.history for p in m.parts] == ["hello there"]
    await client.close()


async def test_stream_sends_chunks_then_completed(served: Served) -> None:
    client = await connect(served.url, streaming=True)
    events: list[StreamResponse] = [e async for e in client.send_message(user_message("one two three four"))]
    kinds = [e.WhichOneof("payload") for e in events]
    assert kinds[0] == "task"
    chunks = [e.artifact_update for e in events if e.HasField("artifact_update")]
    assert len(chunks) >= 3, kinds
    assert "".join(p.text for c in chunks for p in c.artifact.parts) == "[1] one two three four"
    assert chunks[-1].last_chunk and all(c.append for c in chunks[1:])
    final = events[-1].status_update
    assert final.status.state == TaskState.TASK_STATE_COMPLETED
    assert final.metadata["rein"]["termination"] == "agent_stop"
    got = await client.get_task(GetTaskRequest(id=final.task_id))
    assert answer(got) == "[1] one two three four"
    await client.close()


async def test_a_context_id_continues_one_rein_thread(served: Served) -> None:
    client = await connect(served.url)
    first = await send(client, "first")
    second = await send(client, "second", first.context_id)
    assert second.context_id == first.context_id and second.id != first.id
    assert answer(second) == "[2] second"
    assert served.users("bot", first.context_id) == ["first", "second"]
    await client.close()


async def test_a_resent_message_replays_its_answer(served: Served) -> None:
    # A client retrying a message sends its messageId again: the turn is not run twice.
    client = await connect(served.url)
    context_id = uuid.uuid4().hex
    request = user_message("once", context_id)
    tasks = [[e async for e in client.send_message(request)][0].task for _ in range(2)]
    assert [answer(t) for t in tasks] == ["[1] once", "[1] once"]
    assert served.users("bot", context_id) == ["once"]
    await client.close()


async def test_a_model_failure_fails_the_task(served: Served) -> None:
    client = await connect(served.url, agent="broken")
    task = await send(client, "anything")
    assert task.status.state == TaskState.TASK_STATE_FAILED
    assert "model backend unavailable" in task.status.message.parts[0].text
    await client.close()


async def test_a_call_that_needs_approval_pauses_the_task_until_decided(served: Served) -> None:
    client = await connect(served.url, agent="clerk")
    task = await send(client, "cancel A-7")
    assert task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
    (pause,) = get_data_parts(task.status.message.parts)
    assert [(c["id"], c["name"]) for c in pause["approval"]["pending"]] == [("call-A-7", "cancel_order")]
    assert CANCELLED == []

    def on_task(*parts: Part) -> SendMessageRequest:
        message = Message(role=Role.ROLE_USER, message_id=uuid.uuid4().hex, task_id=task.id,
                          context_id=task.context_id, parts=list(parts))
        return SendMessageRequest(message=message)

    # A plain message does not answer the paused call: the task stays paused, nothing runs.
    still = await send(client, "", request=on_task(Part(text="hello?")))
    assert still.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
    assert CANCELLED == []
    done = await send(client, "", request=on_task(new_data_part({"decisions": [{"id": "call-A-7", "approved": True}]})))
    assert done.status.state == TaskState.TASK_STATE_COMPLETED
    assert CANCELLED == ["A-7"]
    assert answer(done).endswith("Done: A-7 cancelled.")
    await client.close()


async def test_keys_are_required_and_tenants_see_only_their_own(served: Served) -> None:
    async with http(None) as anonymous, http("wrong-key") as wrong:
        assert (await anonymous.get(f"{served.url}/a2a/bot/.well-known/agent-card.json")).status_code == 401
        assert (await wrong.post(f"{served.url}/a2a/bot/", json={"jsonrpc": "2.0", "id": 1, "method": "GetTask"})).status_code == 401
    mine = await connect(served.url, key=KEYS[0])
    theirs = await connect(served.url, key=KEYS[1])
    task = await send(mine, "secret")
    with pytest.raises(TaskNotFoundError):
        await theirs.get_task(GetTaskRequest(id=task.id))
    # The same contextId under another tenant is another thread.
    other = await send(theirs, "hi", task.context_id)
    assert answer(other) == "[1] hi"
    assert served.users("bot", task.context_id, KEYS[0]) == ["secret"]
    assert served.users("bot", task.context_id, KEYS[1]) == ["hi"]
    # Nor can it continue another tenant's task.
    request = user_message("more", task.context_id)
    request.message.task_id = task.id
    with pytest.raises(TaskNotFoundError):
        [e async for e in theirs.send_message(request)]
    await mine.close()
    await theirs.close()


async def test_an_unknown_agent_is_404(served: Served) -> None:
    async with http() as fetch:
        with pytest.raises(AgentCardResolutionError, match="404"):
            await A2ACardResolver(fetch, f"{served.url}/a2a/nobody/").get_agent_card()
        r = await fetch.post(f"{served.url}/a2a/nobody/", json={"jsonrpc": "2.0", "id": 1, "method": "SendMessage"})
    assert r.status_code == 404
    assert r.json()["error"]["code"] == "model_not_found"


async def test_the_0_3_method_names_answer_too(served: Served) -> None:
    # message/send and tasks/get, as A2A 0.3 clients call them, on the same endpoint.
    message = {"role": "user", "messageId": uuid.uuid4().hex, "kind": "message", "parts": [{"kind": "text", "text": "old client"}]}
    async with http() as raw:
        sent = (await raw.post(f"{served.url}/a2a/bot/", json={
            "jsonrpc": "2.0", "id": 1, "method": "message/send", "params": {"message": message},
        })).json()["result"]
        got = (await raw.post(f"{served.url}/a2a/bot", json={
            "jsonrpc": "2.0", "id": 2, "method": "tasks/get", "params": {"id": sent["id"]},
        })).json()["result"]
    assert sent["status"]["state"] == got["status"]["state"] == "completed"
    assert got["artifacts"][0]["parts"][0]["text"] == "[1] old client"


@pytest.mark.parametrize("database", ["sqlite", "postgres"])
async def test_tasks_outlive_the_server_process(database: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    # Tasks live in the agent's database, so a restarted server still answers tasks/get.
    if database == "postgres":
        from tests.agent.checkpoint_util import fresh_postgres_database

        spec = await fresh_postgres_database(request.getfixturevalue("postgres_url"), "a2a")
    else:
        spec = f"sqlite:{tmp_path / 'threads.sqlite'}"

    def serve() -> tuple[BackgroundServer, Agent]:
        agent = Agent(FunctionModel(counted), checkpointer=spec, name="bot")
        return BackgroundServer(create_app({"bot": agent}, api_keys=KEYS)).start(), agent

    server, agent = serve()
    task = await send(await connect(server.url), "remember me")
    server.stop()
    agent.close()
    server, agent = serve()
    try:
        got = await (await connect(server.url)).get_task(GetTaskRequest(id=task.id))
        assert got.status.state == TaskState.TASK_STATE_COMPLETED
        assert answer(got) == "[1] remember me"
    finally:
        server.stop()
        agent.close()


async def test_processes_starting_together_on_a_fresh_postgres_database_all_create_the_task_table(
    request: pytest.FixtureRequest,
) -> None:
    # `rein serve --workers N` starts N processes at once; Postgres's CREATE TABLE IF NOT EXISTS
    # lets two of them race on the catalog, and the loser must not fail its start-up.
    from agent.server.a2a_tasks import TaskStores
    from tests.agent.checkpoint_util import fresh_postgres_database

    for _ in range(3):
        spec = await fresh_postgres_database(request.getfixturevalue("postgres_url"), "a2a_race")
        starting = [TaskStores() for _ in range(6)]
        for stores in starting:
            stores.for_checkpointer(spec)
        try:
            await asyncio.gather(*(stores.open() for stores in starting))
        finally:
            await asyncio.gather(*(stores.aclose() for stores in starting))
