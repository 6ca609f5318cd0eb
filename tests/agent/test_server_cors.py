"""CORS: a browser app on an allowed origin can call the server; other origins, and a server
without `cors_origins`, get no CORS headers."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from agent.errors import UserFacingError
from agent.models import EchoModel
from agent.runtime import Agent
from agent.server import BackgroundServer, create_app
from agent.server.cors import check_origin

KEY = "browser-key"
APP_ORIGIN = "https://chat.example.com"
BODY = {"model": "echo", "messages": [{"role": "user", "content": "hi"}]}
PREFLIGHT = {
    "Access-Control-Request-Method": "POST",
    "Access-Control-Request-Headers": "authorization, content-type, x-rein-thread, x-thread-id",
}


def serve(**kw: object) -> BackgroundServer:
    agent = Agent(EchoModel(), checkpointer="memory", name="echo")
    return BackgroundServer(create_app({"echo": agent}, api_keys=[KEY], **kw)).start()


@pytest.fixture(scope="module")
def cors_url() -> Iterator[str]:
    server = serve(cors_origins=[APP_ORIGIN, "http://localhost:5173"])
    yield server.url
    server.stop()


def post(url: str, origin: str | None, key: str = KEY) -> httpx.Response:
    headers = {"Authorization": f"Bearer {key}", "X-Rein-Thread": "browser-t"}
    if origin is not None:
        headers["Origin"] = origin
    return httpx.post(f"{url}/v1/chat/completions", json=BODY, headers=headers, trust_env=False)


def test_preflight_from_an_allowed_origin_allows_the_api_headers(cors_url: str) -> None:
    r = httpx.options(f"{cors_url}/v1/chat/completions", headers={"Origin": APP_ORIGIN, **PREFLIGHT}, trust_env=False)
    assert r.status_code == 200  # answered before auth: a preflight carries no key
    assert r.headers["access-control-allow-origin"] == APP_ORIGIN
    allowed = {h.strip().lower() for h in r.headers["access-control-allow-headers"].split(",")}
    assert {"authorization", "content-type", "x-rein-thread", "x-thread-id"} <= allowed
    assert "POST" in r.headers["access-control-allow-methods"]
    assert "access-control-allow-credentials" not in r.headers


def test_a_request_from_an_allowed_origin_can_read_the_answer_and_thread(cors_url: str) -> None:
    r = post(cors_url, APP_ORIGIN)
    assert r.status_code == 200 and r.json()["choices"][0]["message"]["content"] == "You said: hi"
    assert r.headers["access-control-allow-origin"] == APP_ORIGIN
    assert "x-rein-thread" in r.headers["access-control-expose-headers"].lower()
    assert r.headers["x-rein-thread"] == "browser-t"
    # Errors carry the headers too, so the page can show why it was refused.
    denied = post(cors_url, APP_ORIGIN, key="wrong")
    assert denied.status_code == 401 and denied.headers["access-control-allow-origin"] == APP_ORIGIN


def test_a_disallowed_origin_gets_no_cors_headers(cors_url: str) -> None:
    evil = "https://evil.example.net"
    r = httpx.options(f"{cors_url}/v1/chat/completions", headers={"Origin": evil, **PREFLIGHT}, trust_env=False)
    assert r.status_code == 400 and "access-control-allow-origin" not in r.headers
    # Without Access-Control-Allow-Origin the browser hands the page nothing (Starlette still
    # lists the exposed headers, which grant nothing on their own).
    actual = post(cors_url, evil)
    assert "access-control-allow-origin" not in actual.headers
    assert "access-control-allow-credentials" not in actual.headers


def test_cors_is_off_by_default() -> None:
    server = serve()
    try:
        r = httpx.options(f"{server.url}/v1/chat/completions", headers={"Origin": APP_ORIGIN, **PREFLIGHT},
                          trust_env=False)
        assert r.status_code == 405
        actual = post(server.url, APP_ORIGIN)
        assert actual.status_code == 200
        assert not [h for h in actual.headers if h.startswith("access-control-")]
    finally:
        server.stop()


def test_any_origin() -> None:
    server = serve(cors_origins=["*"])
    try:
        r = httpx.options(f"{server.url}/v1/chat/completions", headers={"Origin": "http://anything.test:8080", **PREFLIGHT},
                          trust_env=False)
        assert r.status_code == 200 and r.headers["access-control-allow-origin"] == "*"
        assert post(server.url, "http://anything.test:8080").headers["access-control-allow-origin"] == "*"
    finally:
        server.stop()


def test_origins_are_checked() -> None:
    assert check_origin("HTTPS://Chat.Example.com") == "https://chat.example.com"
    assert check_origin("http://localhost:3000") == "http://localhost:3000"
    assert check_origin(" * ") == "*"
    for bad in ("https://chat.example.com/", "https://chat.example.com/app", "chat.example.com", "", "https://",
                "https://u@chat.example.com", "https://x.com?q=1", "null"):
        with pytest.raises(UserFacingError, match="not an origin"):
            check_origin(bad)
    with pytest.raises(UserFacingError, match="trailing slash"):
        create_app({"echo": Agent(EchoModel(), checkpointer="memory", name="echo")}, cors_origins=["https://a.com/"])


# Every header the official openai SDKs add to a request (npm 7.60, in a browser; Python's own
# ones too), as a browser lists them in a preflight.
SDK_PREFLIGHT_HEADERS = (
    "authorization,content-type,idempotency-key,openai-organization,openai-project,x-rein-thread,"
    "x-stainless-arch,x-stainless-lang,x-stainless-os,x-stainless-package-version,x-stainless-retry-count,"
    "x-stainless-runtime,x-stainless-runtime-version,x-stainless-timeout,x-stainless-helper-method,"
    "x-stainless-async,x-stainless-read-timeout,x-stainless-raw-response,openai-beta"
)


@pytest.mark.parametrize("origin", [APP_ORIGIN, "*"])
def test_preflight_allows_the_headers_the_openai_sdks_send(origin: str) -> None:
    server = serve(cors_origins=[origin])
    try:
        r = httpx.options(
            f"{server.url}/v1/chat/completions",
            headers={"Origin": APP_ORIGIN, "Access-Control-Request-Method": "POST",
                     "Access-Control-Request-Headers": SDK_PREFLIGHT_HEADERS},
            trust_env=False,
        )
        assert r.status_code == 200, r.text
        allowed = {h.strip().lower() for h in r.headers["access-control-allow-headers"].split(",")}
        assert set(SDK_PREFLIGHT_HEADERS.split(",")) <= allowed
    finally:
        server.stop()


def test_the_npm_openai_sdk_calls_the_server_through_cors(cors_url: str) -> None:
    from tests.js_support import run_node

    out = run_node("openai-cors", "call.mjs", f"{cors_url}/v1", KEY, APP_ORIGIN, "echo")
    assert "error" not in out, out
    assert out["reply"] == "You said: hi from a page" and out["thread"] == "page-1"
    assert out["streamed"] == "You said: again"
    # The SDK's own headers were asked for (and granted) in each preflight.
    asked = set(out["preflights"][0]["asked"])
    assert {"x-stainless-lang", "x-stainless-retry-count", "openai-organization", "openai-project"} <= asked
    assert all(p["status"] == 200 and not p["refused"] for p in out["preflights"])
