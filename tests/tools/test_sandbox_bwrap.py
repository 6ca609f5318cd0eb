"""The OS layer: with bwrap active the worker has no network, no host files and no host processes.

The probes run in a trusted preamble, which executes before the worker's own OS limits apply (and,
as root, before it drops to nobody), so they test the bwrap layer alone. The same probes without
bwrap reach the listener, the files and the host process: that control shows they can fail.
"""

from __future__ import annotations

import os
import socket
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tools.sandbox import SandboxLimits, SandboxSession, sandbox_layers
from tools.sandbox_bwrap import bwrap_status
from tools.sandbox_limits import OsLayer

pytestmark = pytest.mark.core  # needs no extra: also run on the bare core install (.ci/core_check.sh)

_STATUS = bwrap_status()
needs_bwrap = pytest.mark.skipif(not _STATUS.usable, reason=f"bwrap is not usable here: {_STATUS.detail}")
_PROJECT = Path(__file__).resolve().parents[2]

_PROBES = '''
import os, socket

def _connect(port):
    sock = socket.socket()
    sock.settimeout(2)
    try:
        sock.connect(("127.0.0.1", port))
        return "connected"
    except OSError as exc:
        return "blocked: " + type(exc).__name__
    finally:
        sock.close()

def _read(path):
    try:
        with open(path) as handle:
            return "read: " + handle.read()
    except OSError as exc:
        return "blocked: " + type(exc).__name__

def _write(path):
    try:
        with open(path, "w") as handle:
            handle.write("escaped")
        return "written"
    except OSError as exc:
        return "blocked: " + type(exc).__name__

_FOUND = {
    "net": _connect(PORT),
    "project": _read(PROJECT_FILE),
    "home": _read(HOME_FILE),
    "host_tmp": _write(HOST_TMP_FILE),
    "own_tmp": _write(OWN_TMP_FILE),
    "usr": _write(USR_FILE) if WRITE_USR else "skipped",
    "host_pid_visible": os.path.exists("/proc/" + str(HOST_PID)),
    "pids": sorted(int(p) for p in os.listdir("/proc") if p.isdigit()),
}

def probes():
    return _FOUND
'''


@pytest.fixture
def targets(tmp_path: Path) -> Iterator[dict[str, object]]:
    """A real listener, secret files in the project and home directories, and paths to write."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(4)
    tag = uuid.uuid4().hex[:12]
    project_file = _PROJECT / f".sandbox-probe-{tag}"
    home_file = Path.home() / f".rein-sandbox-probe-{tag}"
    own_tmp = Path("/tmp") / f"rein-sandbox-probe-{tag}"
    usr_file = Path("/usr") / f"rein-sandbox-probe-{tag}"
    project_file.write_text("project secret")
    home_file.write_text("home secret")
    data = {
        "PORT": listener.getsockname()[1], "PROJECT_FILE": str(project_file), "HOME_FILE": str(home_file),
        "HOST_TMP_FILE": str(tmp_path / "escaped.txt"), "OWN_TMP_FILE": str(own_tmp),
        "USR_FILE": str(usr_file), "WRITE_USR": False, "HOST_PID": os.getpid(),
    }
    try:
        yield data
    finally:
        listener.close()
        for path in (project_file, home_file, own_tmp, usr_file):
            path.unlink(missing_ok=True)


def _probe(data: dict[str, object], os_layer: OsLayer) -> dict[str, Any]:
    with SandboxSession(preamble=_PROBES, data=data, exports=["probes"],
                        limits=SandboxLimits(os_layer=os_layer)) as session:
        result = session.run("probes()")
        assert result.ok, result.describe()
        assert ("bwrap" in session.layers) == (os_layer == "bwrap")
        return result.value


@needs_bwrap
def test_bwrap_blocks_network_host_files_and_host_processes(targets, tmp_path: Path):
    found = _probe({**targets, "WRITE_USR": True}, "bwrap")
    assert found["net"].startswith("blocked"), found
    assert found["project"].startswith("blocked"), found
    assert found["home"].startswith("blocked"), found
    assert found["host_tmp"].startswith("blocked"), found
    assert found["usr"].startswith("blocked"), found
    assert not (tmp_path / "escaped.txt").exists()
    assert not Path(str(targets["USR_FILE"])).exists()
    # Its own /tmp is writable but is a private tmpfs: nothing appears in the host's /tmp.
    assert found["own_tmp"] == "written"
    assert not Path(str(targets["OWN_TMP_FILE"])).exists()
    assert found["host_pid_visible"] is False
    assert len(found["pids"]) <= 3, found["pids"]


def test_without_the_os_layer_the_same_probes_reach_the_host(targets, tmp_path: Path):
    found = _probe(targets, "none")
    assert found["net"] == "connected"
    assert found["project"] == "read: project secret"
    assert found["host_pid_visible"] is True
    if os.geteuid() == 0:  # root could also read the home file and write the test's tmp dir
        assert found["home"] == "read: home secret"
        assert found["host_tmp"] == "written" and (tmp_path / "escaped.txt").exists()


@needs_bwrap
def test_layers_are_reported_and_the_sandbox_works_inside_bwrap():
    layers, note = sandbox_layers(SandboxLimits(os_layer="auto"))
    assert "bwrap" in layers and "bwrap active" in note
    with SandboxSession(limits=SandboxLimits(os_layer="bwrap")) as session:
        assert session.run("v = 6\nv * 7").value == 42
        assert "bwrap" in session.layers
        if os.geteuid() == 0:
            assert "uid-nobody" in session.layers
        assert session.describe().startswith("sandbox layers: ast-check")
    assert "bwrap" not in sandbox_layers(SandboxLimits(os_layer="none"))[0]


def test_unknown_os_layer_is_rejected() -> None:
    with pytest.raises(ValueError, match="os_layer"):
        SandboxLimits(os_layer="docker")  # type: ignore[arg-type]  # not an OS layer, on purpose
