"""Tenant isolation: threads of one API key's tenant are invisible to every other key, whether
named by a header, by `user` or derived from the conversation; keys of one named tenant share."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from openai import OpenAI

from agent.errors import UserFacingError
from agent.messages import ModelRequest
from agent.models import EchoModel, FunctionModel
from agent.runtime import Agent
from agent.server import (
    ApiKey,
    ApiKeys,
    BackgroundServer,
    ServerConfig,
    create_app,
    key_id,
    load_api_keys,
    storage_id,
)

ALICE, BOB, TEAM_1, TEAM_2 = "alice-secret-key", "bob-secret-key", "team-key-one", "team-key-two"
KEY_FILE = f"""# two people, each their own tenant
{ALICE}
{BOB}
# two keys of one team, which share threads on purpose
support-team: {TEAM_1}
support-team: {TEAM_2}
"""
SECRET = "Remember this: my password is PINEAPPLE-42"
QUESTION = "What password did I tell you earlier?"


def recall(request: ModelRequest) -> str:
    """Answers with every user message it was shown, so any leaked history shows in the reply."""
    return " | ".join(m.text for m in request.messages if m.role == "user")


class Served:
    def __init__(self, tmp: Path) -> None:
        keys = tmp / "keys.txt"
        keys.write_text(KEY_FILE)
        db = f"sqlite:{tmp / 'threads.sqlite'}"
        self.agents = {
            "recall": Agent(FunctionModel(recall), checkpointer=db, name="recall"),
            "echo": Agent(EchoModel(), checkpointer=db, name="echo"),
        }
        self.app = create_app(self.agents, api_keys=load_api_keys(keys, {}), config=ServerConfig(request_timeout_s=30))
        self.server = BackgroundServer(self.app).start()

    def client(self, key: str) -> OpenAI:
        return OpenAI(base_url=f"{self.server.url}/v1", api_key=key, max_retries=0,
                      http_client=httpx.Client(trust_env=False, timeout=30))

    def chat(self, key: str, content: str | list[dict[str, str]], model: str = "recall", **kw: object):
        messages = [{"role": "user", "content": content}] if isinstance(content, str) else content
        raw = self.client(key).chat.completions.with_raw_response.create(model=model, messages=messages, **kw)
        return raw.parse(), raw.headers

    def texts(self, agent: str, thread: str, tenant: str) -> list[str]:
        return [m.text for m in self.agents[agent].history(storage_id(agent, thread, tenant))]


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    s = Served(tmp_path_factory.mktemp("tenants"))
    yield s
    s.server.stop()
    for agent in s.agents.values():
        agent.close()


def test_a_header_thread_of_one_key_is_invisible_to_another(served: Served) -> None:
    thread = {"X-Rein-Thread": f"acct-alice-{uuid.uuid4().hex[:6]}"}
    a, a_headers = served.chat(ALICE, SECRET, extra_headers=thread)
    b, b_headers = served.chat(BOB, QUESTION, extra_headers=thread)
    assert a.choices[0].message.content == SECRET
    # Bob's turn ran on a thread of his own: the model saw his question only.
    assert b.choices[0].message.content == QUESTION
    assert "PINEAPPLE" not in b.model_dump_json()
    # Both clients get back the id they sent, not a tenant-prefixed one.
    for response, headers in ((a, a_headers), (b, b_headers)):
        assert headers["x-rein-thread"] == thread["X-Rein-Thread"]
        assert response.model_extra["rein"]["thread_id"] == thread["X-Rein-Thread"]
        assert response.model_extra["rein"]["action"] == "append"
    # Alice's thread still holds her conversation only, and continues.
    again, _ = served.chat(ALICE, "and now?", extra_headers=thread)
    assert again.choices[0].message.content == f"{SECRET} | and now?"
    tid = thread["X-Rein-Thread"]
    assert served.texts("recall", tid, key_id(ALICE)) == [SECRET, SECRET, "and now?", f"{SECRET} | and now?"]
    assert served.texts("recall", tid, key_id(BOB)) == [QUESTION, QUESTION]
    assert served.agents["recall"].history(storage_id("recall", tid)) == []  # nothing unscoped


def test_usage_shows_no_history_of_another_key(served: Served) -> None:
    thread = {"X-Rein-Thread": f"usage-{uuid.uuid4().hex[:6]}"}
    long_history = SECRET + " " + "x" * 4000
    served.chat(ALICE, long_history, model="echo", extra_headers=thread)
    b, _ = served.chat(BOB, QUESTION, model="echo", extra_headers=thread)
    fresh, _ = served.chat(BOB, QUESTION, model="echo", extra_headers={"X-Rein-Thread": f"fresh-{uuid.uuid4().hex}"})
    assert b.usage is not None and fresh.usage is not None
    # The echo model counts the prompt it was sent: Bob's is exactly a fresh thread's, not ~1000
    # tokens of Alice's message more.
    assert b.usage.prompt_tokens == fresh.usage.prompt_tokens < 100
    assert b.choices[0].message.content == f"You said: {QUESTION}"


RETRY = {"X-Stainless-Retry-Count": "1"}
"""What the openai SDKs send on their first automatic retry of a request."""


def test_a_user_field_thread_is_per_key(served: Served) -> None:
    user = f"customer-{uuid.uuid4().hex[:6]}"
    served.chat(ALICE, SECRET, user=user)
    b, b_headers = served.chat(BOB, QUESTION, user=user)
    assert b.choices[0].message.content == QUESTION
    assert b.model_extra["rein"]["thread_id"] == user == b_headers["x-rein-thread"]
    assert served.texts("recall", user, key_id(BOB)) == [QUESTION, QUESTION]


def test_a_derived_thread_is_per_key_and_never_replays_another_keys_reply(served: Served) -> None:
    opening = [{"role": "system", "content": f"shop {uuid.uuid4().hex[:6]}"}, {"role": "user", "content": "Hi, I need help"}]
    a, _ = served.chat(ALICE, opening)
    thread = a.model_extra["rein"]["thread_id"]
    assert thread.startswith("conv-")
    # Alice continues; her thread now holds her private follow-up.
    history = [*opening, {"role": "assistant", "content": a.choices[0].message.content}, {"role": "user", "content": SECRET}]
    served.chat(ALICE, history)
    # Bob opens identically: same client-visible id, but his own thread, so it runs afresh.
    b, _ = served.chat(BOB, opening)
    assert b.model_extra["rein"]["thread_id"] == thread
    assert b.model_extra["rein"]["action"] == "append"
    assert b.choices[0].message.content == "Hi, I need help"
    # Bob sending Alice's whole history (say he saw her screen) runs on his thread, never
    # replaying her stored answer; her thread is untouched.
    b2, _ = served.chat(BOB, history)
    assert b2.model_extra["rein"]["action"] == "append"
    assert served.texts("recall", thread, key_id(ALICE)) == [
        "Hi, I need help", "Hi, I need help", SECRET, f"Hi, I need help | {SECRET}"]
    # Alice's own retry of her last request (the SDK numbers its retries) is a replay of her answer.
    retry, _ = served.chat(ALICE, history, extra_headers=RETRY)
    assert retry.model_extra["rein"]["action"] == "replay"
    assert retry.choices[0].message.content == f"Hi, I need help | {SECRET}"


def test_forks_stay_inside_their_tenant(served: Served) -> None:
    user = f"forky-{uuid.uuid4().hex[:6]}"
    a1, _ = served.chat(ALICE, "one", user=user)
    m = [{"role": "user", "content": "one"}, {"role": "assistant", "content": a1.choices[0].message.content}]
    served.chat(ALICE, [*m, {"role": "user", "content": "two"}], user=user)
    edited = [*m, {"role": "user", "content": f"TWO {SECRET}"}]
    fork, _ = served.chat(ALICE, edited, user=user)
    fork_id = fork.model_extra["rein"]["thread_id"]
    assert fork_id.startswith(user + "~") and fork.model_extra["rein"]["forked_from"] == user
    # Bob on the same `user` id and the same edited history lands on his own base thread.
    b, _ = served.chat(BOB, edited, user=user)
    assert b.model_extra["rein"]["thread_id"] == user and b.model_extra["rein"]["forked_from"] is None
    # And naming Alice's fork id directly gives him an empty thread of his own.
    b2, _ = served.chat(BOB, QUESTION, extra_headers={"X-Rein-Thread": fork_id})
    assert b2.choices[0].message.content == QUESTION
    assert served.texts("recall", fork_id, key_id(ALICE))[-2:] == [f"TWO {SECRET}", f"one | TWO {SECRET}"]
    assert served.texts("recall", fork_id, key_id(BOB)) == [QUESTION, QUESTION]


def test_a_stream_never_replays_another_keys_answer(served: Served) -> None:
    thread = {"X-Rein-Thread": f"stream-{uuid.uuid4().hex[:6]}"}
    served.chat(ALICE, SECRET, extra_headers=thread)
    with served.client(BOB).chat.completions.with_streaming_response.create(
        model="recall", messages=[{"role": "user", "content": QUESTION}], stream=True, extra_headers=thread,
    ) as response:
        assert response.headers["x-rein-thread"] == thread["X-Rein-Thread"]
        text = "".join(c.choices[0].delta.content or "" for c in response.parse() if c.choices)
    assert text == QUESTION


def test_keys_of_one_named_tenant_share_threads(served: Served) -> None:
    thread = {"X-Rein-Thread": f"team-{uuid.uuid4().hex[:6]}"}
    served.chat(TEAM_1, "ticket 7 is urgent", extra_headers=thread)
    r, _ = served.chat(TEAM_2, "what was urgent?", extra_headers=thread)
    assert r.choices[0].message.content == "ticket 7 is urgent | what was urgent?"
    # A derived thread is shared too: the second key's retry of the first's request replays it.
    opening = [{"role": "user", "content": f"team opening {uuid.uuid4().hex[:6]}"}]
    first, _ = served.chat(TEAM_1, opening)
    second, _ = served.chat(TEAM_2, opening, extra_headers=RETRY)
    assert second.model_extra["rein"]["action"] == "replay"
    assert second.choices[0].message.content == first.choices[0].message.content
    # Outside the team, nothing of it shows.
    outsider, _ = served.chat(ALICE, "what was urgent?", extra_headers=thread)
    assert outsider.choices[0].message.content == "what was urgent?"
    assert served.texts("recall", thread["X-Rein-Thread"], "support-team")[:2] == ["ticket 7 is urgent"] * 2


async def test_server_state_history_names_the_owner(tmp_path: Path) -> None:
    agent = Agent(FunctionModel(recall), checkpointer=f"sqlite:{tmp_path / 't.sqlite'}", name="recall")
    app = create_app({"recall": agent}, api_keys={ALICE: None, TEAM_1: "support-team", TEAM_2: "support-team"})
    state = app.state.rein
    await state.open()
    try:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://rein") as http:
            for key, text in ((ALICE, SECRET), (TEAM_1, "team note")):
                r = await http.post("/v1/chat/completions", headers={"Authorization": f"Bearer {key}", "X-Rein-Thread": "t"},
                                    json={"model": "recall", "messages": [{"role": "user", "content": text}]})
                assert r.status_code == 200, r.text
                assert r.headers["x-rein-thread"] == "t"
        assert [m.text for m in await state.history("recall", "t", api_key=ALICE)] == [SECRET, SECRET]
        assert [m.text for m in await state.history("recall", "t", api_key=TEAM_2)] == ["team note"] * 2
        assert [m.text for m in await state.history("recall", "t", tenant="support-team")] == ["team note"] * 2
        assert [m.text for m in await state.history("recall", "t", tenant=key_id(ALICE))] == [SECRET, SECRET]
        for kwargs, match in (({}, "name the thread's owner"), ({"api_key": "stolen"}, "not one of this server's keys"),
                              ({"tenant": "nobody"}, "not a tenant"),
                              ({"api_key": ALICE, "tenant": "support-team"}, "name the thread's owner")):
            with pytest.raises(ValueError, match=match):
                await state.history("recall", "t", **kwargs)
    finally:
        await state.aclose()


async def test_an_open_server_keeps_unscoped_thread_ids(tmp_path: Path) -> None:
    agent = Agent(FunctionModel(recall), checkpointer=f"sqlite:{tmp_path / 't.sqlite'}", name="recall")
    app = create_app({"recall": agent})
    state = app.state.rein
    await state.open()
    try:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://rein") as http:
            r = await http.post("/v1/chat/completions", headers={"X-Rein-Thread": "open-t"},
                                json={"model": "recall", "messages": [{"role": "user", "content": "hi"}]})
            assert r.status_code == 200, r.text
        assert [m.text for m in await agent.ahistory("recall/open-t")] == ["hi", "hi"]
        assert [m.text for m in await state.history("recall", "open-t")] == ["hi", "hi"]
        with pytest.raises(ValueError, match="no API keys"):
            await state.history("recall", "open-t", api_key=ALICE)
    finally:
        await state.aclose()


def test_storage_ids_of_tenants_never_meet() -> None:
    assert storage_id("bot", "t") == "bot/t"
    assert storage_id("bot", "t", "team") == "@team/bot/t"
    assert storage_id("bot", "t", key_id(ALICE)) != storage_id("bot", "t", key_id(BOB))
    # A client-chosen id stays inside its tenant's namespace, whatever it holds; tenant ids
    # hold no `/`, so the tenant part always ends at the first one.
    assert storage_id("bot", "../other/bot/t", "a").startswith("@a/bot/")
    with pytest.raises(ValueError):
        storage_id("bot", "t", "a/x")
    # An open server's ids start with the agent's name, which may not look like a tenant.
    with pytest.raises(UserFacingError, match="may not start with '@'"):
        create_app({"@team": Agent(EchoModel(), checkpointer="memory")})


def test_key_ids_are_stable_and_hide_the_key() -> None:
    assert key_id(ALICE) == key_id(ALICE) != key_id(BOB)
    assert key_id(ALICE).startswith("key:") and ALICE not in key_id(ALICE)
    keys = ApiKeys([ALICE, ApiKey(TEAM_1, "support-team"), ApiKey(TEAM_2, "support-team")])
    assert keys.check(f"Bearer {ALICE}") == key_id(ALICE)
    assert keys.check(f"Bearer {TEAM_1}") == keys.check(f"Bearer {TEAM_2}") == "support-team"
    assert keys.tenants == {key_id(ALICE), "support-team"}


def test_key_file_with_tenants_and_env(tmp_path: Path) -> None:
    f = tmp_path / "keys.txt"
    f.write_text(KEY_FILE)
    env = {"REIN_API_KEYS": f"ops: ops-key, solo-key, support-team: {TEAM_1}"}
    loaded = load_api_keys(f, env)
    assert [(k.key, k.tenant) for k in loaded] == [
        (ALICE, None), (BOB, None), (TEAM_1, "support-team"), (TEAM_2, "support-team"), ("ops-key", "ops"),
        ("solo-key", None)]
    # A key holding a colon is still a plain key when no space follows it.
    assert [(k.key, k.tenant) for k in load_api_keys(None, {"REIN_API_KEYS": "sk:abc="})] == [("sk:abc=", None)]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("good-key\nbad name: k1\n", "line 2: expected `KEY` or `TENANT: KEY`"),
        ("team/a: k1\n", "line 1: tenant name 'team/a' is invalid"),
        ("-team: k1\n", "tenant name '-team' is invalid"),
        ("team k1\n", "line 1: expected `KEY` or `TENANT: KEY`"),
        (": k1\n", "line 1: expected"),
        ("team: ключ\n", "line 1: API keys must be printable ASCII"),
        ("a: shared-key\nb: shared-key\n", "given twice, for tenants 'a' and 'b'"),
        ("shared-key\nb: shared-key\n", "given twice, for tenants (its own) and 'b'"),
    ],
)
def test_malformed_key_files_are_clear_errors(tmp_path: Path, text: str, message: str) -> None:
    f = tmp_path / "keys.txt"
    f.write_text(text)
    with pytest.raises(UserFacingError, match=None) as info:
        load_api_keys(f, {})
    assert message in str(info.value)
    assert "shared-key" not in str(info.value)  # a key is never echoed into logs


def test_malformed_env_entries_are_clear_errors() -> None:
    with pytest.raises(UserFacingError, match="REIN_API_KEYS: tenant name 'bad!' is invalid"):
        load_api_keys(None, {"REIN_API_KEYS": "ok-key, bad!: k2"})
    with pytest.raises(UserFacingError, match="tenant name"):
        create_app({"e": Agent(EchoModel(), checkpointer="memory")}, api_keys=[ApiKey("k", "no spaces")])
