"""The sandbox under faults: a CPU limit the code cannot catch, deeply nested data, and namespaces
that survive a worker that had to be killed."""

from __future__ import annotations

import pickle

import pytest

from tools.sandbox import SandboxError, SandboxLimits, SandboxSession
from tools.sandbox_worker import Worker

pytestmark = pytest.mark.core  # needs no extra: also run on the bare core install (.ci/core_check.sh)

_NEST = "x = []\nfor i in range(100000):\n    x = [x]\n"


@pytest.fixture(scope="module")
def box():
    with SandboxSession(limits=SandboxLimits(cpu_s=0.5, wall_s=5.0, memory_mb=200)) as s:
        yield s


@pytest.mark.parametrize(
    "code",
    [
        "try:\n    while True:\n        pass\nexcept:\n    pass\n'caught'",
        "while True:\n    try:\n        while True:\n            pass\n    except:\n        pass",
        "for i in range(10 ** 9):\n    try:\n        while True:\n            pass\n    finally:\n        continue",
        "def f():\n    try:\n        while True:\n            pass\n    finally:\n        return 'swallowed'\nwhile True:\n    f()",
        "try:\n    while True:\n        pass\nexcept:\n    pass",
        "def g():\n    while True:\n        yield 1\nfor v in g():\n    try:\n        sum([v] * 1000)\n    except:\n        pass",
    ],
    ids=["bare-except", "except-in-loop", "finally-continue", "finally-return", "except-then-end", "generator"],
)
def test_the_cpu_limit_cannot_be_caught_and_the_namespace_survives(box, code):
    assert box.run("kept = 'yes'").ok
    starts = box.starts
    result = box.run(code)
    assert result.error_type == "CpuTimeExceeded", result.describe()
    assert "CPU time" in (result.error_message or "")
    assert result.namespace_reset is False
    assert result.duration_s < 3.0, "the limit should end the run at cpu_s, not at the RLIMIT backstop"
    assert box.starts == starts, "the worker must not have been killed"
    assert box.run("kept").value == "yes"
    assert box.run("1 + 1").value == 2


@pytest.mark.parametrize(
    "tail",
    ["print(x)", "repr(x)", "str(x)", "x == [x]", "y = {'k': x}\nprint(y)"],
)
def test_deeply_nested_data_fails_cleanly_and_keeps_the_namespace(box, tail):
    assert box.run("kept = 41").ok
    starts = box.starts
    result = box.run(_NEST + tail)
    assert result.error_type == "RecursionError", result.describe()
    assert result.namespace_reset is False and box.starts == starts
    assert box.run("kept + 1").value == 42
    # The nested value itself stays usable; only the deep walk failed.
    assert box.run("len(x)").value == 1


def test_returning_deeply_nested_data_gives_an_abbreviated_repr(box):
    result = box.run(_NEST + "x")
    assert result.ok and result.value is None
    assert result.value_repr is not None and "..." in result.value_repr


def test_emitting_deeply_nested_data_is_an_error_not_a_crash():
    preamble = "def send(obj):\n    emit(obj)\n"
    with SandboxSession(preamble=preamble, limits=SandboxLimits(cpu_s=2.0)) as s:
        assert s.run("kept = 'here'").ok
        result = s.run(_NEST + "send(x)")
        assert result.error_type == "ResultNotSerializable", result.describe()
        assert result.events == [] and result.namespace_reset is False
        assert s.starts == 1
        assert s.run("kept").value == "here"


def test_injecting_deeply_nested_data_is_refused_on_the_host(box):
    assert box.run("kept = 7").ok
    deep: list = []
    for _ in range(100_000):
        deep = [deep]
    with pytest.raises(SandboxError, match="picklable"):
        box.run("len(deep)", inject={"deep": deep})
    assert box.run("kept").value == 7


def test_a_c_level_crash_restores_the_namespace_from_the_snapshot():
    # A chain of 100,000 map() iterators recurses in C without a depth check: the worker segfaults.
    with SandboxSession(limits=SandboxLimits(cpu_s=2.0, wall_s=10.0)) as s:
        setup = ("a = [1, 2]\nb = a\nd = {'k': {1, 2}, 't': (1.5, 'x')}\n"
                 "def f(k):\n    return k + len(a)\ng = lambda: 1\n")
        assert s.run(setup).ok
        result = s.run("lost_too = 1\nm = iter([])\nfor i in range(100000):\n    m = map(abs, m)\nnext(m, None)")
        assert result.error_type == "SandboxCrashed", result.describe()
        assert "SIGSEGV" in (result.error_message or "")
        assert result.namespace_reset is True
        assert result.restored == ["a", "b", "d", "f"] and result.lost == ["g"]
        assert "not restorable and gone: g" in result.describe()
        assert s.starts == 2
        after = s.run("b.append(3)\n(a, f(1), d['k'], d['t'])")
        assert after.ok and after.namespace_reset is False, after.describe()
        assert after.value_repr == "([1, 2, 3], 4, {1, 2}, (1.5, 'x'))"
        assert s.run("lost_too").error_type == "NameError"
        assert s.run("g").error_type == "NameError"


def test_wall_time_and_rlimit_kills_restore_the_namespace():
    with SandboxSession(limits=SandboxLimits(cpu_s=0.5, wall_s=1.0)) as s:
        assert s.run("x = 5\ndef twice(v):\n    return 2 * v").ok
        burned = s.run("sum(range(10 ** 14))")  # C code: only RLIMIT_CPU stops it, killing the worker
        assert burned.error_type in ("CpuTimeExceeded", "WallTimeExceeded")
        assert burned.namespace_reset is True and burned.restored == ["twice", "x"]
        assert s.run("twice(x)").value == 10


def test_values_past_the_snapshot_cap_are_reported_lost():
    limits = SandboxLimits(cpu_s=30.0, wall_s=0.5, snapshot_bytes=20_000)
    with SandboxSession(limits=limits) as s:
        assert s.run("small = 'ok'\nbig = list(range(100000))\nnested = []\nfor i in range(5000):\n    nested = [nested]").ok
        result = s.run("while True:\n    pass")
        assert result.error_type == "WallTimeExceeded"
        assert result.restored == ["i", "small"] and result.lost == ["big", "nested"]
        assert s.run("small").value == "ok"
        assert s.run("big").error_type == "NameError"


def test_a_snapshot_can_only_hold_plain_builtin_data():
    import os

    worker = Worker({"limits": {"output_chars": 100, "max_events": 10, "snapshot_bytes": 1000}})
    hostile = {"pwn": pickle.dumps(("value", os.system)), "ok": pickle.dumps(("value", {1: [2.5]}))}
    outcome = worker.restore(hostile, {"alias": "pwn"})
    assert outcome == {"restored": ["ok"], "restore_failed": ["alias", "pwn"]}
    assert "pwn" not in worker.namespace and worker.namespace["ok"] == {1: [2.5]}
    # Function sources are vetted like any code before they run.
    outcome = worker.restore({"f": pickle.dumps(("def", "import os"))}, {})
    assert outcome == {"restored": [], "restore_failed": ["f"]}


def test_snapshots_send_only_what_changed():
    worker = Worker({"limits": {"output_chars": 100, "max_events": 10, "snapshot_bytes": 10_000_000}})
    worker.namespace.update(big=list(range(100_000)), counter=1)
    first = worker.snapshot()
    assert first is not None and sorted(first["set"]) == ["big", "counter"]
    assert worker.snapshot() is None
    worker.namespace["counter"] = 2
    second = worker.snapshot()
    assert second is not None and list(second["set"]) == ["counter"] and second["names"] == ["big", "counter"]
    worker.namespace["big"].append(1)  # mutated in place: found by comparing the pickled bytes
    assert list((worker.snapshot() or {})["set"]) == ["big"]


_SEGFAULT = "m = iter([])\nfor i in range(100000):\n    m = map(abs, m)\nnext(m, None)"


@pytest.mark.parametrize("default", ["max(k for k in range(n))", "sum(range(n))"], ids=["python-loop", "c-loop"])
def test_a_restore_that_loops_is_stopped_and_the_session_reset(default):
    # A default argument is evaluated again when its def is restored: fast when defined, endless
    # once `n` has grown. The restore runs under the CPU limit, fails, and the session starts clean.
    limits = SandboxLimits(cpu_s=0.5, wall_s=10.0, startup_s=20.0)
    with SandboxSession(limits=limits) as s:
        assert s.run(f"n = 1\ndef f(x={default}):\n    return x").ok
        assert s.run("n = 10 ** 15").ok
        crashed = s.run(_SEGFAULT)
        assert crashed.error_type == "SandboxCrashed", crashed.describe()
        assert crashed.namespace_reset is True and crashed.restored == [] and crashed.lost == ["f", "n"]
        assert "CPU time" in (crashed.restore_error or ""), crashed.restore_error
        assert "the session was reset and all variables are gone" in crashed.describe()
        assert crashed.duration_s < limits.startup_s, "the restore must stop at the CPU limit, not at startup_s"
        after = s.run("1 + 1")
        assert after.ok and after.value == 2 and after.namespace_reset is False, after.describe()
        assert after.duration_s < 2.0
        assert s.run("n").error_type == "NameError"
        assert s.run("n = 5\nn * 2").value == 10
