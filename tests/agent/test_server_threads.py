"""Thread reconciliation, fork ids, thread keys, API keys and request validation of the server."""

from __future__ import annotations

import json
import random

import pytest

from agent.errors import UserFacingError
from agent.messages import Message, ToolCall
from agent.server.auth import ApiKeys, key_id, load_api_keys
from agent.server.errors import ApiError
from agent.server.schema import MAX_JSON_DEPTH, check_depth, client_history, parse_request
from agent.server.threads import (
    Turn,
    check_key,
    compare,
    compare_window,
    derived_key,
    fork_id,
    is_open,
    merge_turns,
    reply_text,
    thread_turns,
)


def turns(*pairs: tuple[str, str]) -> list[Turn]:
    return [Turn(role, text) for role, text in pairs]  # type: ignore[arg-type]


U1, A1, U2, A2, U3 = ("user", "hi"), ("assistant", "hello!"), ("user", "book it"), ("assistant", "done"), ("user", "thanks")


def test_compare_extends_replay_unanswered_diverges() -> None:
    thread = turns(U1, A1)
    assert compare(turns(U1, A1, U2), thread).kind == "extends"
    assert compare(turns(U1, A1, U2), thread).index == 2
    assert compare(turns(U1), []).kind == "extends"
    replay = compare(turns(U1), thread)
    assert (replay.kind, replay.reply) == ("replay", "hello!")
    assert compare(turns(U1, A1, U2), turns(U1, A1, U2)).kind == "unanswered"
    edited = compare(turns(("user", "hey"), A1, U2), thread)
    assert (edited.kind, edited.index) == ("diverges", 0)
    # A history that stops inside the thread (more than one reply short) diverges where it stops.
    short = compare(turns(U1), turns(U1, A1, U2, A2))
    assert (short.kind, short.index) == ("diverges", 1)


def test_assistant_text_matches_up_to_whitespace_truncation_and_decoration() -> None:
    thread = turns(U1, ("assistant", "The answer is 42."))
    assert compare(turns(U1, ("assistant", "The  answer\nis 42. "), U2), thread).kind == "extends"
    assert compare(turns(U1, ("assistant", "The answer"), U2), thread).kind == "extends"  # stopped stream
    assert compare(turns(U1, ("assistant", "Plan: x. The answer is 42."), U2), thread).kind == "extends"
    assert compare(turns(U1, ("assistant", "Something else"), U2), thread).kind == "diverges"
    # User text must match exactly (up to whitespace).
    assert compare(turns(("user", "hi there"), A1, U2), turns(U1, A1)).kind == "diverges"


def test_fork_ids_are_deterministic_and_stable_across_the_forked_conversation() -> None:
    thread = turns(U1, A1, U2, A2)
    edit = turns(U1, A1, ("user", "cancel it"))
    d = compare(edit, thread).index
    fork = fork_id("k", "k", edit, d)
    assert fork.startswith("k~") and fork == fork_id("k", "k", edit, d)
    # The same edited history, continued, reaches the same fork...
    continued = edit + turns(("assistant", "cancelled"), U3)
    assert fork_id("k", "k", continued, compare(continued, thread).index) == fork
    # ...a different edit at the same place does not.
    other = turns(U1, A1, ("user", "change it"))
    assert fork_id("k", "k", other, 2) != fork
    # A request for another answer (its history stops there) gets a fork of its own per nonce
    # (its Idempotency-Key, so its resends find it); the turns after it are found by the words of
    # the answer they carry, however a chat UI re-rendered them.
    regen = turns(U1, A1, U2)
    at = compare(regen, turns(U1, A1, U2, A2, U3, ("assistant", "bye"))).index
    assert fork_id("k", "k", regen, at, "n1") == fork_id("k", "k", regen, at, "n1") != fork_id("k", "k", regen, at, "n2")
    after = regen + turns(("assistant", "Done **again**."), U3)
    rerendered = regen + turns(("assistant", "done again"), U3)
    assert fork_id("k", "k", after, 3) == fork_id("k", "k", rerendered, 3)
    assert fork_id("k", "k", after, 3) != fork_id("k", "k", regen + turns(("assistant", "other"), U3), 3)
    # Forks of forks hash their parent, so they never collide with it.
    assert fork_id("k", fork, edit, d) != fork


def test_compare_on_the_thread_s_first_turns_decides_as_on_the_whole_thread() -> None:
    rng = random.Random(17)
    words = ["hi", "hello!", "book it", "done", "thanks", "hi "]
    seen = set()
    for _ in range(4000):
        history = []
        for _ in range(rng.randrange(0, 12)):
            role = rng.choice(["user", "assistant", "assistant"])
            history.append(Message.user(rng.choice(words)) if role == "user" else Message.assistant(rng.choice(words + [""])))
        full = thread_turns(history)
        # Clients: a prefix of the thread (possibly edited) plus a new user message, or a fresh one.
        client = full[: rng.randrange(0, len(full) + 1)]
        if client and rng.random() < 0.3:
            i = rng.randrange(len(client))
            client[i] = Turn(client[i].role, rng.choice(words))
        client = [*client, Turn("user", rng.choice(words))]
        window = thread_turns(history, compare_window(client))
        assert window == full[: compare_window(client)]
        assert compare(client, window) == compare(client, full), (client, full)
        seen.add(compare(client, full).kind)
    assert seen == {"extends", "replay", "unanswered", "diverges"}


def test_merge_turns_joins_consecutive_replies() -> None:
    merged = merge_turns([("user", "a"), ("assistant", "x"), ("assistant", "y"), ("user", "b"), ("user", "c")])
    assert merged == turns(("user", "a"), ("assistant", "x\n\ny"), ("user", "b"), ("user", "c"))


def test_thread_turns_and_reply_text_skip_tool_traffic_and_plants() -> None:
    call = ToolCall(name="add", arguments="{}")
    think = ToolCall(name="think", arguments='{"thought": "plan"}')
    planted = [Message.assistant("", [think]), Message.tool(think.id, "think", "")]
    for m in planted:
        m.metadata["planted_by"] = "rein"
    history = [
        Message.user("hi"), Message.assistant("hello"), Message.user("add 2 and 3"), *planted,
        Message.assistant("Adding.", [call]), Message.tool(call.id, "add", "5"), Message.assistant("It is 5."),
    ]
    assert thread_turns(history) == turns(("user", "hi"), ("assistant", "hello"), ("user", "add 2 and 3"),
                                          ("assistant", "Adding.\n\nIt is 5."))
    assert reply_text(history) == "Adding.\n\nIt is 5."
    assert not is_open(history)
    assert is_open(history[:-1]) and is_open(history[:-2]) and is_open(history[:3])
    assert not is_open([])


def test_derived_key_depends_on_first_user_message_and_system_text_only() -> None:
    a = derived_key(["You are nice."], turns(U1, A1, U2))
    assert a == derived_key(["You are  nice."], turns(U1))
    assert a != derived_key([], turns(U1))
    assert a != derived_key(["You are nice."], turns(("user", "hello"), A1))
    assert a.startswith("conv-")


def test_check_key_rejects_unusable_keys() -> None:
    assert check_key("  abc  ", "header") == "abc"
    for bad in ("", "   ", "x" * 300, "a\nb"):
        with pytest.raises(ValueError):
            check_key(bad, "header")


def test_api_keys_file_and_env(tmp_path) -> None:
    f = tmp_path / "keys.txt"
    f.write_text("# team keys\nkey-one\n\n  key-two  \n")
    loaded = load_api_keys(f, {"REIN_API_KEYS": "key-three, key-one,"})
    assert [k.key for k in loaded] == ["key-one", "key-two", "key-three"]
    assert all(k.tenant is None for k in loaded)
    assert load_api_keys(None, {}) == []
    empty = tmp_path / "empty.txt"
    empty.write_text("# nothing\n\n")
    with pytest.raises(UserFacingError, match="holds no keys"):
        load_api_keys(empty, {})
    with pytest.raises(UserFacingError, match="cannot read"):
        load_api_keys(tmp_path / "missing.txt", {})
    with pytest.raises(UserFacingError, match="printable ASCII"):
        load_api_keys(None, {"REIN_API_KEYS": "ключ"})


def test_api_key_check() -> None:
    keys = ApiKeys(["alpha", "beta"])
    assert keys.check("Bearer beta") == key_id("beta")
    assert keys.check("bearer  alpha ") == key_id("alpha")
    for header in (None, "", "Bearer", "Basic alpha", "Bearer alph", "Bearer alphaa", "Bearer ключ"):
        with pytest.raises(ApiError) as info:
            keys.check(header)
        assert info.value.status == 401
    assert ApiKeys([]).check(None) is None  # no keys: open, and no tenant


def body(**fields: object) -> bytes:
    return json.dumps({"model": "bot", "messages": [{"role": "user", "content": "hi"}], **fields}).encode()


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (b"", "body is empty"),
        (b"{not json", "not valid JSON"),
        (b"[1, 2]", "must be a JSON object"),
        (json.dumps({"messages": [{"role": "user", "content": "x"}]}).encode(), "model: Field required"),
        (body(messages=[]), "messages: List should have at least 1 item"),
        (body(messages=[{"role": "robot", "content": "x"}]), "messages.0.role"),
        (body(messages=[{"role": "user", "content": "x"}, {"role": "assistant", "content": "y"}]),
         "last message must come from the user"),
        (body(messages=[{"role": "user"}]), "a user message needs content"),
        (body(messages=[{"role": "user", "content": [{"type": "audio", "data": "x"}]}]), "messages.0.content"),
        (body(tools=[{"type": "function", "function": {"name": "f"}}]), "client-side tools are not supported"),
        (body(n=2), "only n=1"),
        (body(stream="maybe"), "stream"),
    ],
)
def test_parse_request_rejects_malformed_bodies(raw: bytes, expected: str) -> None:
    with pytest.raises(ApiError) as info:
        parse_request(raw)
    assert info.value.status == 400
    assert expected in info.value.message


def test_client_history_keeps_text_turns_and_image_parts() -> None:
    req = parse_request(body(
        messages=[
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": [{"type": "text", "text": "what is "}, {"type": "text", "text": "this?"}]},
            {"role": "assistant", "content": None, "tool_calls": [{"id": "c", "type": "function"}]},
            {"role": "tool", "tool_call_id": "c", "content": "42"},
            {"role": "assistant", "content": "A cat."},
            {"role": "user", "content": [{"type": "text", "text": "and"}, {"type": "image_url", "image_url": {"url": "data:image/png;base64,AA"}}]},
        ],
        temperature=0.2, user="u-1",
    ))
    turns_, messages, system = client_history(req)
    assert system == ["be brief"]
    # Text parts keep a line break between them, never "what is this?" run together by accident.
    assert [(t.role, t.text) for t in turns_] == [("user", "what is \nthis?"), ("assistant", "A cat."), ("user", "and")]
    assert messages[0].content == "what is \nthis?"
    assert isinstance(messages[2].content, list) and messages[2].content[1]["type"] == "image_url"
    assert [m.role for m in messages] == ["user", "assistant", "user"]
    # Built when read, once: a slice of the new turns builds only those.
    assert messages[0] is messages[0] and messages[-1] is messages[2] and messages[1:] == [messages[1], messages[2]]
    fresh = client_history(req)[1]
    assert [m.text for m in fresh[2:]] == ["and"] and fresh._built.keys() == {2}
    with pytest.raises(IndexError):
        fresh[3]


def nested(levels: int, open_: str = "[", close: str = "]") -> bytes:
    """A valid request whose `metadata` field nests `levels` arrays (the whole body one more)."""
    return body()[:-1] + b', "metadata": ' + (open_ * levels + close * levels).encode() + b"}"


def test_depth_limit_counts_arrays_and_objects_but_not_brackets_in_strings() -> None:
    check_depth(nested(MAX_JSON_DEPTH - 1))  # the body's own object is the 64th level
    parse_request(nested(MAX_JSON_DEPTH - 1))
    for deep in (nested(MAX_JSON_DEPTH), nested(100_000), nested(40, '[{"a":', "}]")):
        with pytest.raises(ApiError) as info:
            parse_request(deep)
        assert info.value.status == 400 and "more than 64 levels deep" in info.value.message
    # Brackets inside strings (escaped quotes included) are text, not nesting.
    text = json.dumps("[{" * 1000 + '\\"' + "[" * 1000)
    assert parse_request(body(user=json.loads(text))).user.startswith("[{")
    # Unbalanced brackets are left to the JSON parser, which says what is wrong.
    with pytest.raises(ApiError, match="not valid JSON"):
        parse_request(b'{"model": "bot", "messages": [[[')
