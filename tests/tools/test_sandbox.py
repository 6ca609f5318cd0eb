"""The sandbox: persistence, results, limits, and one test per kind of hostile code."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from tools import CallRequest, execute_calls, load_toolkit
from tools.sandbox import SandboxError, SandboxLimits, SandboxSession
from tools.sandbox_worker import ForbiddenCode, check_code

pytestmark = pytest.mark.core  # needs no extra: also run on the bare core install (.ci/core_check.sh)


@pytest.fixture(scope="module")
def box():
    with SandboxSession(limits=SandboxLimits(cpu_s=1.0, wall_s=5.0, memory_mb=200, output_chars=2_000)) as s:
        yield s


def test_namespace_persists_and_final_expression_is_returned(box):
    assert box.run("counter = 40\ndef bump(k):\n    return counter + k").ok
    result = box.run("print('hello')\nbump(2)")
    assert result.ok
    assert result.stdout == "hello\n"
    assert result.value == 42 and result.value_repr == "42"
    assert result.namespace_reset is False
    assert box.run("[i * i for i in range(4)]").value == [0, 1, 4, 9]


def test_user_errors_come_back_with_type_message_and_line(box):
    result = box.run("a = 1\nb = {}\nb['missing']")
    assert result.error_type == "KeyError"
    assert "line 3" in (result.traceback or "")
    assert box.run("def f(:").error_type == "SyntaxError"


def test_non_json_value_comes_back_as_repr_only(box):
    result = box.run("{1, 2, 3}")
    assert result.value is None and result.value_repr == "{1, 2, 3}"


@pytest.mark.parametrize(
    "code",
    ["import os", "from subprocess import run", "__import__('os').system('echo pwned')"],
)
def test_imports_are_rejected(box, code):
    result = box.run(code)
    assert result.error_type == "ForbiddenCode", result.describe()


@pytest.mark.parametrize("name", ["open", "getattr", "eval", "exec", "compile", "globals", "vars", "type", "dir", "input", "breakpoint", "object", "setattr"])
def test_dangerous_builtins_are_absent(box, name):
    result = box.run(f"{name}")
    assert result.error_type == "NameError", f"{name} is reachable: {result.describe()}"


def test_open_cannot_read_files(box):
    result = box.run("open('/etc/passwd').read()")
    assert result.error_type == "NameError"
    assert "root:" not in result.describe()


@pytest.mark.parametrize(
    "code",
    [
        "().__class__.__mro__[1].__subclasses__()",
        "__builtins__",
        "print.__self__",
        "(lambda: 0).__globals__",
        "x = 'a'\nx.__class__",
        "'{0.__class__}'.format(1)",
        "'{a}'.format_map({'a': 1})",
        "int.mro()",
        "g = (i for i in [1])\ng.gi_frame.f_globals",
        "try:\n    1/0\nexcept Exception as e:\n    e.__traceback__.tb_frame",
        "math._private",
        "match 1:\n    case int(__class__=c):\n        pass",
        "def __init__():\n    pass",
        "class A:\n    pass",
    ],
)
def test_dunder_and_introspection_escapes_are_rejected(box, code):
    result = box.run(code)
    assert result.error_type == "ForbiddenCode", f"{code!r} was not rejected: {result.describe()}"


def test_check_code_names_the_problem():
    with pytest.raises(ForbiddenCode, match="__class__"):
        check_code("().__class__")
    check_code("total = sum(x * x for x in range(3))")


def test_infinite_loop_hits_the_cpu_limit_and_keeps_the_namespace(box):
    box.run("kept = 'yes'")
    result = box.run("while True:\n    pass")
    assert result.error_type == "CpuTimeExceeded"
    assert result.namespace_reset is False
    assert box.run("kept").value == "yes"


def test_memory_bomb_gets_a_memory_error(box):
    result = box.run("block = [0] * (10 ** 9)")
    assert result.error_type == "MemoryLimitExceeded"
    result = box.run("blob = 'x' * (2 ** 31)")
    assert result.error_type == "MemoryLimitExceeded"
    assert box.run("1 + 1").value == 2


def test_huge_output_is_capped(box):
    result = box.run("while True:\n    print('spam' * 100)")
    assert result.error_type == "OutputLimitExceeded"
    assert result.stdout_truncated and len(result.stdout) == 2_000
    result = box.run("'y' * 100_000")
    assert result.ok and len(result.value_repr or "") < 1_000 and result.value is None


def test_fork_bomb_and_os_access_fail_in_the_language(box):
    for code in ("os.fork()", "while True:\n    os.fork()", "posix.system('true')", "sys.modules"):
        result = box.run(code)
        assert result.error_type == "NameError", result.describe()


_HOSTILE_HELPERS = '''
import os, socket

def try_fork():
    try:
        pid = os.fork()
    except OSError as exc:
        return "blocked: " + type(exc).__name__
    if pid == 0:
        os._exit(0)
    return "forked"

def try_write(path):
    try:
        with open(path, "w") as handle:
            handle.write("x")
    except OSError as exc:
        return "blocked: " + type(exc).__name__
    return "written"

def try_socket():
    try:
        socket.socket()
    except OSError as exc:
        return "blocked: " + type(exc).__name__
    return "connected"
'''


def test_os_limits_stop_fork_files_and_sockets_even_for_trusted_helpers(tmp_path: Path):
    # The helpers run inside the worker after its OS limits apply: this checks the second layer.
    target = tmp_path / "escaped.txt"
    with SandboxSession(preamble=_HOSTILE_HELPERS) as s:
        s.start()
        if os.geteuid() == 0 and not s.worker_info.get("privileges_dropped"):
            pytest.skip("running as root without permission to drop privileges; RLIMIT_NPROC is not enforced")
        assert s.run("try_fork()").value.startswith("blocked")
        assert s.run(f"try_write({str(target)!r})").value.startswith("blocked")
        assert s.run("try_socket()").value.startswith("blocked")
    assert not target.exists()


def test_wall_time_kill_restarts_and_reports_the_lost_namespace():
    # With snapshots off the old contract holds: the variables are gone and the result says so.
    with SandboxSession(limits=SandboxLimits(cpu_s=30.0, wall_s=0.5, snapshot_bytes=0)) as s:
        s.run("x = 5")
        result = s.run("while True:\n    pass")
        assert result.error_type == "WallTimeExceeded"
        assert result.namespace_reset is True
        after = s.run("x")
        assert after.error_type == "NameError"
        assert s.starts == 2


def test_c_level_cpu_burn_is_killed_by_rlimit():
    # sum() over a range runs in C and never checks signals; RLIMIT_CPU ends it.
    with SandboxSession(limits=SandboxLimits(cpu_s=0.5, wall_s=10.0)) as s:
        result = s.run("sum(range(10 ** 14))")
        assert result.error_type == "CpuTimeExceeded"
        assert result.namespace_reset is True
        assert s.run("2 * 3").value == 6


def test_preamble_helpers_data_hooks_and_events():
    preamble = (
        "moves = []\n"
        "def move(k):\n"
        "    moves.append(k)\n"
        "    emit({'move': k, 'scale': SCALE})\n"
        "def _reset(values):\n"
        "    user_namespace()['board'] = list(values)\n"
    )
    with SandboxSession(preamble=preamble, data={"SCALE": 3}) as s:
        result = s.run("move(board[0])\nmove(7)\nlen(board)", hooks=[("_reset", [[4, 5]])])
        assert result.ok, result.describe()
        assert result.events == [{"move": 4, "scale": 3}, {"move": 7, "scale": 3}]
        assert result.value == 2
        assert s.run("SCALE").error_type == "NameError"
        assert s.run("_reset").error_type == "NameError"
        assert s.run("emit").error_type == "NameError"
        assert s.run("extra + 1", inject={"extra": 1}).value == 2


def test_broken_preamble_is_a_clear_error():
    with pytest.raises(SandboxError, match="ZeroDivisionError"):
        SandboxSession(preamble="1 / 0").start()


def test_python_toolkit_runs_code_and_reports_errors():
    kit = load_toolkit("python")
    tools = kit.as_dict()
    ok, bad = asyncio.run(execute_calls(
        [CallRequest("a", "python", {"code": "v = 6\nv * 7"}), CallRequest("b", "python", {"code": "import os"})],
        tools,
    ))
    assert ok.content == "=> 42" and not ok.is_error
    assert bad.is_error and "ForbiddenCode" in bad.content
    kit["python"].metadata["sandbox_session"].close()
