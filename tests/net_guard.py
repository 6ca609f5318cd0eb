"""The suite's network guard: no test reaches a host other than this machine.

Tests run real servers, real Postgres and real Ray clusters, all on this machine; a test that
opens a TCP connection anywhere else (a forgotten real-model path, a library's telemetry) is a
test that needs the internet, costs money, or flakes. The guard wraps the Python socket layer of
the test process: a stream connection to an address that is not loopback and not one of this
machine's own addresses, or a name lookup of a host that is neither, raises `NetworkRefused`
(an OSError, so clients give up at once as on a refused connection) and is recorded, and the
test fails at teardown even when a library swallowed the error. UDP "connects" pass: they send
nothing (Ray uses one to learn the machine's own address).

A test that truly needs the network says so with `@pytest.mark.allow_network`.
Subprocesses are outside its reach; the suite points them at a dead loopback model endpoint
instead (OPENAI_BASE_URL, see conftest.py).
"""

from __future__ import annotations

import functools
import ipaddress
import socket
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

MARKER = "allow_network"


class NetworkRefused(ConnectionRefusedError):
    """A test tried to reach a host outside this machine."""


class Guard:
    """Wraps socket connect and getaddrinfo; remembers what it refused."""

    def __init__(self) -> None:
        self.refused: list[str] = []
        """What was refused since the last `take()`, as readable lines."""
        self.enabled = True
        """False while a test marked allow_network runs."""

    def take(self) -> list[str]:
        """The refusals so far, forgetting them."""
        found, self.refused = self.refused, []
        return found

    def _refuse(self, what: str) -> NetworkRefused:
        self.refused.append(what)
        return NetworkRefused(
            f"rein's test suite allows no network beyond this machine: {what} was refused "
            f"(mark the test @pytest.mark.{MARKER} if it really needs the network)"
        )

    def check_connect(self, sock: socket.socket, address: Any) -> None:
        """Raise NetworkRefused for a stream connection to a foreign address."""
        if not self.enabled or sock.family not in (socket.AF_INET, socket.AF_INET6):
            return
        if sock.type != socket.SOCK_STREAM:
            return
        host = address[0] if isinstance(address, tuple) else address
        if not _local_ip(str(host)):
            raise self._refuse(f"a connection to {host}:{address[1]}")

    def check_lookup(self, host: Any) -> None:
        """Raise NetworkRefused for a name lookup of a host outside this machine."""
        if not self.enabled or host is None:
            return
        name = host.decode() if isinstance(host, bytes) else str(host)
        # An address literal needs no lookup; check_connect judges the connection.
        if _ip(name) is not None or _local_name(name):
            return
        raise self._refuse(f"a lookup of {name!r}")


def _ip(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(text.split("%", 1)[0])
    except ValueError:
        return None


@functools.lru_cache(maxsize=256)
def _local_ip(text: str) -> bool:
    ip = _ip(text)
    if ip is None:
        return _local_name(text)
    if ip.is_loopback or ip.is_unspecified:
        return True
    # One of this machine's own addresses (Ray binds and dials the eth0 address): the kernel
    # lets us bind exactly those.
    family = socket.AF_INET6 if ip.version == 6 else socket.AF_INET
    with _ORIGINAL_SOCKET(family, socket.SOCK_DGRAM) as probe:
        try:
            probe.bind((str(ip), 0))
        except OSError:
            return False
    return True


@functools.lru_cache(maxsize=256)
def _local_name(name: str) -> bool:
    if _ip(name) is not None:
        return _local_ip(name)
    lowered = name.lower().rstrip(".")
    if lowered in ("", "localhost", "ip6-localhost", "ip6-loopback") or lowered.endswith(".localhost"):
        return True
    return lowered in {socket.gethostname().lower(), socket.getfqdn().lower()}


_ORIGINAL_SOCKET = socket.socket


@contextmanager
def installed(guard: Guard) -> Iterator[Guard]:
    """Wrap the socket layer with guard while the block runs."""
    connect = socket.socket.connect
    connect_ex = socket.socket.connect_ex
    getaddrinfo = socket.getaddrinfo

    def guarded_connect(sock: socket.socket, address: Any) -> None:
        guard.check_connect(sock, address)
        return connect(sock, address)

    def guarded_connect_ex(sock: socket.socket, address: Any) -> int:
        guard.check_connect(sock, address)
        return connect_ex(sock, address)

    def guarded_getaddrinfo(host: Any, *args: Any, **kwargs: Any) -> Any:
        guard.check_lookup(host)
        return getaddrinfo(host, *args, **kwargs)

    patches: list[tuple[Any, str, Callable[..., Any]]] = [
        (socket.socket, "connect", guarded_connect),
        (socket.socket, "connect_ex", guarded_connect_ex),
        (socket, "getaddrinfo", guarded_getaddrinfo),
    ]
    saved = [(owner, name, getattr(owner, name)) for owner, name, _ in patches]
    for owner, name, value in patches:
        setattr(owner, name, value)
    try:
        yield guard
    finally:
        for owner, name, value in saved:
            setattr(owner, name, value)
