"""The kernel layer: without bubblewrap, Landlock and seccomp keep files and the network out of reach.

The escape runs as a hook: preamble code the host calls after the worker has applied every limit,
which is where code that got past the language checks would run. Like the hostile code in issue 35
it closes descriptor 2 to get round RLIMIT_NOFILE, then reads a secret and the project's source,
connects to a listener on 127.0.0.1 and creates a file. Without an OS layer all of that works (the
control); with Landlock and seccomp none of it does. Where neither bubblewrap nor Landlock exists
(here: Landlock hidden by a seccomp filter, as some containers do) untrusted code is refused unless
the host opts out with os_layer="none".
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tools.sandbox import SandboxLimits, SandboxSession
from tools.sandbox_kernel import kernel_status

pytestmark = pytest.mark.core  # needs no extra: also run on the bare core install (.ci/core_check.sh)

_KERNEL = kernel_status()
needs_landlock = pytest.mark.skipif(not _KERNEL.usable, reason=_KERNEL.detail)
_PROJECT = Path(__file__).resolve().parents[2]

_ESCAPE = '''
import os, socket

def _attempt(action):
    try:
        return "done: " + str(action())
    except OSError as exc:
        return "blocked: " + type(exc).__name__

def _read(path):
    with open(path) as handle:
        return handle.read(40)

def _connect(port):
    with socket.socket() as sock:
        sock.settimeout(2)
        sock.connect(("127.0.0.1", port))
        return "connected"

def _create(path):
    with open(path, "x"):
        return "created"

def escape():
    os.close(2)  # RLIMIT_NOFILE=3 leaves no free descriptor: free one, as the hostile code did
    emit({
        "secret": _attempt(lambda: _read(SECRET)),
        "source": _attempt(lambda: _read(SOURCE)),
        "net": _attempt(lambda: _connect(PORT)),
        "create": _attempt(lambda: _create(CREATE)),
    })
'''


@pytest.fixture
def targets() -> Iterator[dict[str, Any]]:
    """A real listener, a secret file anyone may read, the project's source, and a path to create."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(4)
    tag = uuid.uuid4().hex[:12]
    secret = _PROJECT / f".sandbox-kernel-probe-{tag}"
    secret.write_text("project secret")
    secret.chmod(0o644)
    create = Path("/tmp") / f"rein-kernel-probe-{tag}"
    data = {"PORT": listener.getsockname()[1], "SECRET": str(secret),
            "SOURCE": str(_PROJECT / "tools" / "sandbox.py"), "CREATE": str(create)}
    try:
        yield data
    finally:
        listener.close()
        secret.unlink(missing_ok=True)
        create.unlink(missing_ok=True)


def _escape(targets: dict[str, Any], os_layer: str) -> tuple[dict[str, str], list[str]]:
    limits = SandboxLimits(os_layer=os_layer)  # type: ignore[arg-type]  # str from parametrize
    with SandboxSession(preamble=_ESCAPE, data=targets, exports=[], limits=limits) as session:
        result = session.run("1", hooks=[("escape", [])])
        assert result.ok, result.describe()
        return result.events[0], session.layers


def test_without_an_os_layer_escaped_code_reaches_files_and_the_network(targets):
    found, layers = _escape(targets, "none")
    assert "landlock" not in layers and "bwrap" not in layers
    assert found["secret"] == "done: project secret", found
    assert found["source"].startswith('done: """A Python sandbox'), found
    assert found["net"] == "done: connected", found
    assert found["create"] == "done: created" and Path(targets["CREATE"]).exists(), found


@needs_landlock
def test_landlock_and_seccomp_stop_escaped_code_without_bwrap(targets):
    found, layers = _escape(targets, "landlock")
    assert "landlock" in layers and "bwrap" not in layers, layers
    for probe in ("secret", "source", "net", "create"):
        assert found[probe].startswith("blocked: "), found
    assert not Path(targets["CREATE"]).exists()


def _child(script: str, *, hide_landlock: bool) -> dict[str, Any]:
    """Run `script` in a fresh interpreter with no bwrap on PATH (and, if asked, no Landlock)."""
    prelude = "import json\n"
    if hide_landlock:
        prelude += ("from tools.sandbox_kernel import deny_syscalls\n"
                    "deny_syscalls(['landlock_create_ruleset'])\n")
    done = subprocess.run([sys.executable, "-c", prelude + script], capture_output=True, text=True, timeout=120,
                          cwd=_PROJECT, env={"PATH": "/nonexistent", "PYTHONPATH": str(_PROJECT)}, check=False)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


_AUTO = '''
from tools.sandbox import SandboxLimits, SandboxSession, sandbox_layers
with SandboxSession(preamble=ESCAPE, data=TARGETS, exports=[]) as session:
    result = session.run("1", hooks=[("escape", [])])
    print(json.dumps({"events": result.events, "layers": session.layers, "note": session.describe(),
                      "planned": sandbox_layers(SandboxLimits())[0]}))
'''


@needs_landlock
def test_auto_falls_back_to_landlock_when_bwrap_is_missing(targets):
    script = f"ESCAPE = {_ESCAPE!r}\nTARGETS = {targets!r}\n{_AUTO}"
    seen = _child(script, hide_landlock=False)
    assert "bwrap" not in seen["layers"] and "landlock" in seen["layers"], seen
    assert seen["planned"] == seen["layers"]
    assert "bwrap is not installed" in seen["note"] and "Landlock ABI" in seen["note"]
    found = seen["events"][0]
    assert all(found[probe].startswith("blocked: ") for probe in found), found
    assert not Path(targets["CREATE"]).exists()


_REFUSED = '''
from tools.sandbox import SandboxError, SandboxLimits, SandboxSession
seen = {}
try:
    SandboxSession().run("1")
except SandboxError as exc:
    seen["auto"] = str(exc)
try:
    SandboxSession(limits=SandboxLimits(os_layer="landlock")).run("1")
except SandboxError as exc:
    seen["landlock"] = str(exc)
with SandboxSession(limits=SandboxLimits(os_layer="none")) as session:
    seen["opted_in"] = session.run("6 * 7").value
    seen["layers"] = session.layers
print(json.dumps(seen))
'''


def test_with_no_os_layer_untrusted_code_is_refused_unless_the_host_opts_out():
    seen = _child(_REFUSED, hide_landlock=True)
    assert "no OS sandbox layer is available here" in seen["auto"], seen
    assert "bubblewrap" in seen["auto"] and "Landlock" in seen["auto"] and "os_layer='none'" in seen["auto"]
    assert "os_layer='landlock' was asked for" in seen["landlock"], seen
    assert seen["opted_in"] == 42
    assert not {"bwrap", "landlock", "seccomp"} & set(seen["layers"])


@needs_landlock
def test_the_worker_reports_what_the_kernel_layer_applied():
    with SandboxSession(limits=SandboxLimits(os_layer="landlock")) as session:
        assert session.run("sum(range(10))").value == 45
        info = session.worker_info
        assert info["landlock_abi"] == _KERNEL.landlock_abi and info["kernel_error"] == ""
        assert info["seccomp"] is _KERNEL.seccomp
        assert ("seccomp" in session.layers) is _KERNEL.seccomp
        assert "Landlock ABI" in session.describe()
