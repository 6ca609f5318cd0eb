"""`rein serve`'s connection and request limits, on real server processes over raw sockets: slow
and idle connections are closed, idle sockets cannot starve requests of descriptors, thread ids
outside Latin-1 travel in the X-Rein-Thread header, bodies the parser cannot hold get 400 before
any turn, one request cannot carry unbounded messages, and a SIGTERM drain still answers 503."""

from __future__ import annotations

import json
import resource
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from agent.server.thread_header import read_thread_header

REIN = Path(sys.executable).parent / "rein"


@dataclass
class Served:
    """A running `rein serve` process and where it listens."""

    proc: subprocess.Popen[str]
    """The server process."""
    url: str
    """http://127.0.0.1:PORT"""

    @property
    def port(self) -> int:
        """The port it listens on."""
        return int(self.url.rsplit(":", 1)[1])

    def post(self, body: dict | bytes, headers: dict[str, str] | None = None, timeout: float = 30) -> httpx.Response:
        """POST a chat completion request (a dict is sent as JSON)."""
        content = body if isinstance(body, bytes) else json.dumps(body).encode()
        return httpx.post(f"{self.url}/v1/chat/completions", content=content, timeout=timeout, trust_env=False,
                          headers={"content-type": "application/json", **(headers or {})})


def start(tmp_path: Path, *options: str, fd_limit: int | None = None) -> Served:
    """`rein serve` on the echo model and an in-memory database, once /healthz answers."""
    spec = tmp_path / "echo.yaml"
    spec.write_text("name: echo-bot\nmodel: echo\n")

    def limit_fds() -> None:
        assert fd_limit is not None
        resource.setrlimit(resource.RLIMIT_NOFILE, (fd_limit, fd_limit))

    log = (tmp_path / f"serve-{time.monotonic_ns()}.log").open("w")
    proc = subprocess.Popen(
        [str(REIN), "serve", "--agent", str(spec), "--db", "memory", "--port", "0", "--log-level", "warning", *options],
        stdout=subprocess.PIPE, stderr=log, text=True, preexec_fn=limit_fds if fd_limit else None,
    )
    line = proc.stdout.readline() if proc.stdout else ""
    if "/v1" not in line:
        proc.kill()
        raise AssertionError(f"rein serve did not start: {line!r} {Path(log.name).read_text()}")
    url = line.split(" on ", 1)[1].split("/v1", 1)[0]
    deadline = time.monotonic() + 30
    while True:
        try:
            if httpx.get(f"{url}/healthz", trust_env=False).status_code == 200:
                return Served(proc, url)
        except httpx.TransportError:
            pass
        if time.monotonic() > deadline:
            proc.kill()
            raise AssertionError("rein serve never became healthy")
        time.sleep(0.05)


def stop(served: Served) -> int:
    served.proc.send_signal(signal.SIGTERM)
    return served.proc.wait(timeout=30)


@pytest.fixture(scope="module")
def plain(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """A server with only long-standing options, so these tests fail for their own reason on old code."""
    served = start(tmp_path_factory.mktemp("plain"))
    yield served
    assert stop(served) == 0


def connect(port: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=5)
    return sock


def read_until_closed(sock: socket.socket, timeout: float) -> bytes:
    """Everything the server sends until it closes the connection; fails if it does not in time."""
    sock.settimeout(timeout)
    data = b""
    try:
        while chunk := sock.recv(65536):
            data += chunk
    except TimeoutError:
        raise AssertionError(f"the server kept the connection open past {timeout} s (got {data[:200]!r})") from None
    except ConnectionResetError:
        pass
    return data


def chat(content: str = "hi", **extra: object) -> dict:
    return {"model": "echo-bot", "messages": [{"role": "user", "content": content}], **extra}


# --- item 5: connections that never time out -----------------------------------------------------


def test_idle_partial_header_partial_body_and_kept_alive_connections_are_closed(tmp_path: Path) -> None:
    served = start(tmp_path, "--header-timeout", "0.5", "--keep-alive-timeout", "0.5", "--body-timeout", "0.5")
    try:
        idle, partial_head, partial_body, kept = (connect(served.port) for _ in range(4))
        partial_head.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-")
        body = json.dumps(chat()).encode()
        partial_body.sendall(
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\ncontent-type: application/json\r\n"
            b"content-length: %d\r\n\r\n" % len(body) + body[:10]
        )
        kept.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        started = time.monotonic()
        assert read_until_closed(idle, 5) == b""  # closed silently: it never sent a byte
        assert read_until_closed(partial_head, 5).startswith(b"HTTP/1.1 408 ")
        answer = read_until_closed(partial_body, 5)
        assert answer.startswith(b"HTTP/1.1 408 ") and b'"code": "body_timeout"' in answer
        assert read_until_closed(kept, 5).startswith(b"HTTP/1.1 200 ")  # answered, then closed when idle
        assert time.monotonic() - started < 4
        assert served.post(chat()).status_code == 200  # the server itself is fine
    finally:
        assert stop(served) == 0


def test_idle_sockets_cannot_use_up_the_descriptors_requests_need(tmp_path: Path) -> None:
    # 300 idle sockets against a 256-descriptor limit: before, the requests that followed waited
    # (or were reset) until the idle ones went away; now the longest-idle ones make room.
    served = start(tmp_path, fd_limit=256)
    idle = []
    try:
        for _ in range(300):
            idle.append(connect(served.port))
        time.sleep(0.5)
        r = httpx.get(f"{served.url}/healthz", timeout=5, trust_env=False)
        assert r.status_code == 200
        assert served.post(chat("still served"), timeout=5).json()["choices"][0]["message"]["content"] == (
            "You said: still served"
        )
    finally:
        for sock in idle:
            sock.close()
        assert stop(served) == 0


def test_max_connections_drops_the_longest_idle_and_refuses_when_all_are_busy(tmp_path: Path) -> None:
    served = start(tmp_path, "--max-connections", "2")
    body = json.dumps(chat("busy")).encode()
    head = (b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\ncontent-type: application/json\r\n"
            b"content-length: %d\r\n\r\n" % len(body))
    socks = []
    try:
        oldest, newer = connect(served.port), connect(served.port)
        socks += [oldest, newer]
        time.sleep(0.2)
        newer.sendall(head + body[:5])  # busy: its request is in flight
        time.sleep(0.2)
        third = connect(served.port)  # the server is full: the idle `oldest` makes room
        socks.append(third)
        assert read_until_closed(oldest, 5) == b""
        third.sendall(head + body[:5])
        time.sleep(0.2)
        fourth = connect(served.port)  # both held connections are busy now
        socks.append(fourth)
        assert read_until_closed(fourth, 5).startswith(b"HTTP/1.1 503 ")
        for sock in (newer, third):
            sock.sendall(body[5:])
            assert sock.recv(65536).startswith(b"HTTP/1.1 200 ")
    finally:
        for sock in socks:
            sock.close()
        assert stop(served) == 0


def test_connection_limits_are_checked_at_start(tmp_path: Path) -> None:
    spec = tmp_path / "echo.yaml"
    spec.write_text("name: echo-bot\nmodel: echo\n")
    for option, error in ((["--header-timeout", "0"], "--header-timeout must be positive"),
                          (["--max-connections", "0"], "--max-connections must be at least 1"),
                          (["--max-messages", "0"], "--max-messages must be at least 1")):
        done = subprocess.run([str(REIN), "serve", "--agent", str(spec), "--db", "memory", *option],
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 2 and error in done.stderr


# --- item 6: thread ids outside Latin-1, lone surrogates ------------------------------------------


@pytest.mark.parametrize("user", ["李雷", "party 🎉", "line\u2028sep", "\ufeffbom"])
def test_a_user_outside_latin1_names_a_thread_the_header_carries(plain: Served, user: str) -> None:
    first = plain.post(chat("one", user=user))
    assert first.status_code == 200, first.text
    header = first.headers["x-rein-thread"]
    assert header.isascii() and read_thread_header(header) == user.strip() == first.json()["rein"]["thread_id"]
    # Sending the header back continues that thread, as the `user` field does.
    again = plain.post({"model": "echo-bot", "messages": [{"role": "user", "content": "one"},
                        {"role": "assistant", "content": "You said: one"}, {"role": "user", "content": "two"}]},
                       headers={"X-Rein-Thread": header})
    assert again.status_code == 200
    assert again.json()["rein"]["thread_id"] == user.strip() and again.json()["rein"]["action"] == "append"
    assert again.json()["rein"]["forked_from"] is None
    # A history that diverges moves to a fork, whose id the header carries as well.
    streamed = plain.post(chat("three", user=user, stream=True))
    assert streamed.status_code == 200 and "data: [DONE]" in streamed.text
    assert read_thread_header(streamed.headers["x-rein-thread"]).startswith(user.strip() + "~")


def test_lone_surrogates_are_rejected_before_any_turn(plain: Served) -> None:
    bodies = [
        b'{"model": "echo-bot", "messages": [{"role": "user", "content": "hi \\ud800"}]}',
        b'{"model": "echo-bot", "messages": [{"role": "system", "content": "\\udfff"}, {"role": "user", "content": "hi"}]}',
        b'{"model": "echo-bot", "messages": [{"role": "user", "content": "hi"}], "user": "a\\ud83d"}',
    ]
    for body in bodies:
        r = plain.post(body, headers={"X-Rein-Thread": "surrogates"})
        assert r.status_code == 400 and "lone surrogate" in r.json()["error"]["message"], r.text
    # Nothing was committed: the thread starts with this request, no fork from a stored turn.
    r = plain.post(chat("hello"), headers={"X-Rein-Thread": "surrogates"})
    assert r.status_code == 200 and r.json()["rein"]["forked_from"] is None
    # A correctly paired surrogate escape is just an emoji.
    ok = plain.post(b'{"model": "echo-bot", "messages": [{"role": "user", "content": "\\ud83c\\udf89"}]}')
    assert ok.json()["choices"][0]["message"]["content"] == "You said: 🎉"


# --- item 7: bodies the parser cannot hold --------------------------------------------------------


def test_unclosed_brackets_and_huge_integers_are_400(plain: Served) -> None:
    unclosed = b'{"model": "echo-bot", "messages": ' + b"[" * 100_000
    r = plain.post(unclosed)
    assert r.status_code == 400 and "levels deep" in r.json()["error"]["message"]
    for field in ("max_tokens", "n"):
        r = plain.post(b'{"model": "echo-bot", "messages": [{"role": "user", "content": "hi"}], "%s": 1%s}'
                       % (field.encode(), b"0" * 5000))
        assert r.status_code == 400, r.text
        assert r.json()["error"]["code"] == "invalid_request"


# --- item 8: work one request can put on the event loop ------------------------------------------


def test_a_request_with_too_many_messages_is_400_at_once(plain: Served) -> None:
    flood = {"model": "echo-bot", "messages": [{"role": "user", "content": ""}] * 125_000}
    started = time.monotonic()
    r = plain.post(flood, headers={"X-Rein-Thread": "flood"})
    took = time.monotonic() - started
    assert r.status_code == 400 and "2048 messages" in r.json()["error"]["message"], r.text
    assert took < 3, f"rejecting the flood took {took:.1f} s"
    # Fewer values per message, still too many messages: counted after parsing.
    r = plain.post({"model": "echo-bot", "messages": [{"role": "user", "content": "m"}] * 3000})
    assert r.status_code == 400 and r.json()["error"]["param"] == "messages", r.text
    assert "3000 messages; this server accepts at most 2048" in r.json()["error"]["message"]
    # Content parts: as costly to parse as messages, bounded with them.
    parts = {"model": "echo-bot", "messages": [{"role": "user", "content": [{"type": "text", "text": ""}] * 120_000}]}
    r = plain.post(parts)
    assert r.status_code == 400 and "120004 arrays and objects" in r.json()["error"]["message"], r.text
    many = {"model": "echo-bot", "messages": [{"role": "user", "content": f"m{i}"} for i in range(2048)]}
    assert plain.post(many, headers={"X-Rein-Thread": "many"}).status_code == 200


def test_max_messages_is_an_option(tmp_path: Path) -> None:
    served = start(tmp_path, "--max-messages", "3")
    try:
        three = {"model": "echo-bot", "messages": [{"role": "user", "content": "a"}] * 3}
        assert served.post(three).status_code == 200
        r = served.post({**three, "messages": three["messages"] * 2})
        assert r.status_code == 400 and "at most 3" in r.json()["error"]["message"]
    finally:
        assert stop(served) == 0


# --- item 11: the SIGTERM drain -------------------------------------------------------------------


def test_a_draining_server_accepts_connections_and_answers_503(tmp_path: Path) -> None:
    served = start(tmp_path)
    body = json.dumps(chat("in flight")).encode()
    inflight = connect(served.port)
    try:
        # A request in flight (its body half sent) keeps the server draining.
        inflight.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\ncontent-type: application/json\r\n"
                         b"content-length: %d\r\n\r\n" % len(body) + body[:10])
        time.sleep(0.3)
        served.proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 5
        while True:
            r = httpx.get(f"{served.url}/healthz", timeout=5, trust_env=False)  # connects: never refused
            if r.status_code == 503 or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        assert r.status_code == 503 and r.json() == {"status": "shutting_down"}
        late = served.post(chat("late"))
        assert late.status_code == 503 and late.json()["error"]["code"] == "shutting_down"
        assert served.proc.poll() is None
        inflight.sendall(body[10:])
        assert read_until_closed(inflight, 10).startswith(b"HTTP/1.1 ")
        assert served.proc.wait(timeout=15) == 0  # nothing left to drain: it stops
    finally:
        inflight.close()
        if served.proc.poll() is None:
            served.proc.kill()
