"""The suite's network guard (tests/net_guard.py) refuses hosts beyond this machine and lets
loopback through.

Each test installs a guard of its own inside the session's: the inner one judges first, so what
it refuses never reaches the session guard (which would fail the test at teardown).
"""

from __future__ import annotations

import socket

import net_guard
import pytest

from agent.messages import Message, ModelRequest, ModelSettings
from agent.models.openai_compat import ModelAPIError, OpenAIModel
from agent.models.retry import RetryPolicy

pytestmark = pytest.mark.core  # needs no extra: also run on the bare core install (.ci/core_check.sh)

# TEST-NET-3 (RFC 5737): documentation addresses that belong to no machine.
FOREIGN = ("203.0.113.7", 443)


def test_a_connection_beyond_this_machine_is_refused_and_recorded() -> None:
    refused = pytest.raises(net_guard.NetworkRefused, match="203.0.113.7:443")
    with net_guard.installed(net_guard.Guard()) as guard, socket.socket() as sock, refused:
        sock.connect(FOREIGN)
    assert guard.take() == ["a connection to 203.0.113.7:443"]


def test_connect_ex_and_name_lookups_are_refused_too() -> None:
    with net_guard.installed(net_guard.Guard()) as guard, socket.socket() as sock:
        with pytest.raises(net_guard.NetworkRefused):
            sock.connect_ex(FOREIGN)
        with pytest.raises(net_guard.NetworkRefused, match="api.openai.com"):
            socket.getaddrinfo("api.openai.com", 443)
    assert guard.take() == ["a connection to 203.0.113.7:443", "a lookup of 'api.openai.com'"]


def test_loopback_and_this_machines_names_pass() -> None:
    with net_guard.installed(net_guard.Guard()) as guard, socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(1)
        with socket.create_connection(server.getsockname(), timeout=5):
            pass
        assert socket.getaddrinfo("localhost", 80)
    assert guard.take() == []


def test_a_disabled_guard_lets_a_marked_test_through() -> None:
    guard = net_guard.Guard()
    guard.enabled = False
    with socket.socket() as sock:
        guard.check_connect(sock, FOREIGN)  # no connection is made: only the judgement is asked
    guard.check_lookup("api.openai.com")
    assert guard.take() == []


async def test_a_real_model_endpoint_is_refused_before_any_request_leaves() -> None:
    model = OpenAIModel("gpt-4o-mini", base_url="https://api.openai.com/v1", api_key="sk-not-a-key",
                        retry_policy=RetryPolicy(max_retries=0))
    request = ModelRequest(messages=[Message.user("hi")], settings=ModelSettings(max_tokens=1))
    with net_guard.installed(net_guard.Guard()) as guard:
        try:
            with pytest.raises(ModelAPIError):
                await model.complete(request)
        finally:
            await model.aclose()
    refused = guard.take()
    assert refused and all("api.openai.com" in line for line in refused), refused
