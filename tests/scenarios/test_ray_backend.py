"""`rein run --backend ray` on a real two-node Ray cluster on loopback addresses: the same results
as a local batch, resume across backends, and a worker killed mid-run."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agent.cli import main
from scenarios.loading import collect_scenarios
from scenarios.orchestrator import RunOptions, script_model
from scenarios.ray_backend import DelayedModel, RayBackend, RunSpec, build_run_options
from scenarios.runner import run_batch

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "scenarios" / "examples"
RAY = Path(sys.executable).with_name("ray")
# Loopback addresses other than 127.0.0.1, which Ray would swap for the machine's own address.
HEAD_IP, NODE_IP = "127.0.0.2", "127.0.0.3"
TIMINGS = ("started_at", "duration_s", "latency_s")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_node(args: list[str], log: Path) -> subprocess.Popen[bytes]:
    # A session of its own: teardown finds every process Ray started by its session id.
    with log.open("wb") as f:
        return subprocess.Popen([str(RAY), "start", "--block", "--disable-usage-stats", *args],
                                stdout=f, stderr=subprocess.STDOUT, start_new_session=True, env=os.environ.copy())


def wait_started(proc: subprocess.Popen[bytes], log: Path, timeout: float = 90) -> str | None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        text = log.read_text(errors="replace")
        if "Ray runtime started" in text:
            return None
        if proc.poll() is not None:
            return text[-1500:]
        time.sleep(0.5)
    return log.read_text(errors="replace")[-1500:]


def stop_sessions(procs: list[subprocess.Popen[bytes]]) -> None:
    sessions = {p.pid for p in procs}
    for p in procs:  # no graceful drain: it waits up to 30 s
        with contextlib.suppress(ProcessLookupError):
            os.killpg(p.pid, signal.SIGKILL)
    # Ray's workers run in process groups of their own, but in the session of their `ray start`.
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError, IndexError, ValueError):
            stat = (entry / "stat").read_text()
            if int(stat.rsplit(")", 1)[1].split()[3]) in sessions:
                os.kill(int(entry.name), signal.SIGKILL)
    for p in procs:
        with contextlib.suppress(subprocess.TimeoutExpired):
            p.wait(timeout=10)


@pytest.fixture(scope="module")
def ray_cluster() -> Iterator[str]:
    """A head node (2 CPUs) and a second worker node (1 CPU); yields the head's address."""
    pytest.importorskip("ray", reason="Ray is not installed (pip install 'rein-runtime[ray]')")
    temp = Path(tempfile.mkdtemp(prefix="rein-ray-"))  # short: Ray's socket paths must fit 107 bytes
    # Token auth off, said explicitly, for the nodes and this driver: left unset, a head turns it
    # on when ~/.ray/auth_token exists and a joining node does not, so the node cannot join.
    # The cluster listens on loopback addresses only, for the length of this module.
    saved = os.environ.get("RAY_AUTH_MODE")
    os.environ["RAY_AUTH_MODE"] = "disabled"
    port = free_port()
    address = f"{HEAD_IP}:{port}"
    common = ["--object-store-memory", str(80 * 1024 * 1024)]
    procs: list[subprocess.Popen[bytes]] = []
    try:
        head = start_node(["--head", "--port", str(port), "--node-ip-address", HEAD_IP, "--num-cpus", "2",
                           "--temp-dir", str(temp), "--include-dashboard=false",
                           "--ray-client-server-port", str(free_port()),
                           "--dashboard-agent-listen-port", str(free_port()), *common], temp / "head.log")
        procs.append(head)
        if (failure := wait_started(head, temp / "head.log")) is not None:
            pytest.skip(f"Ray cannot start a head node here:\n{failure}")
        node = start_node(["--address", address, "--node-ip-address", NODE_IP, "--num-cpus", "1",
                           "--dashboard-agent-listen-port", str(free_port()), *common], temp / "node.log")
        procs.append(node)
        if (failure := wait_started(node, temp / "node.log")) is not None:
            pytest.skip(f"Ray cannot start a worker node here:\n{failure}")
        yield address
    finally:
        stop_sessions(procs)
        shutil.rmtree(temp, ignore_errors=True)
        if saved is None:
            os.environ.pop("RAY_AUTH_MODE", None)
        else:
            os.environ["RAY_AUTH_MODE"] = saved


def comparable(results: dict[str, Any]) -> dict[str, Any]:
    """results.json without timings."""

    def strip(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: strip(v) for k, v in value.items() if k not in TIMINGS}
        if isinstance(value, list):
            return [strip(v) for v in value]
        return value

    return strip(results)


def read(out: Path) -> dict[str, Any]:
    return json.loads((out / "results.json").read_text())


def runs_lines(out: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in (out / "runs.jsonl").read_text().splitlines()]


async def local_batch(out: Path, trials: int, latency_s: float = 0.0) -> dict[str, Any]:
    options, _ = build_run_options(RunSpec(model="scripted", latency_s=latency_s))
    await run_batch(collect_scenarios([EXAMPLES]), options, out, trials=trials, concurrency=4, progress=False,
                    config={"model": "scripted"})
    return read(out)


async def kill_a_busy_worker(backend: RayBackend, batch: asyncio.Future[Any]) -> list[str]:
    """SIGKILL the process of a worker that has runs in flight; returns those runs' keys."""
    for _ in range(600):
        await asyncio.sleep(0.05)
        assert not batch.done(), "the batch ended before a worker could be killed"
        busy = {pid: keys for pid, keys in backend.in_flight().items() if keys}
        if busy:
            pid, keys = next(iter(busy.items()))
            os.kill(pid, signal.SIGKILL)
            return keys
    raise AssertionError("no worker ever had a run in flight")


@pytest.mark.slow
def test_the_cli_on_ray_matches_a_local_run_and_resumes_across_backends(
    ray_cluster: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    local, on_ray = tmp_path / "local", tmp_path / "ray"
    base = ["run", str(EXAMPLES), "--model", "scripted", "--json", "--no-progress"]
    args = [*base, "--trials", "2"]
    assert main([*args, "--out", str(local)]) == 0
    capsys.readouterr()
    ray_args = ["--backend", "ray", "--ray-address", ray_cluster, "--workers", "2", "--worker-concurrency", "2"]
    assert main([*args, "--out", str(on_ray), *ray_args]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["complete"] and summary["success_rate"] == 1.0 and summary["ran"] == summary["runs"] >= 10
    assert comparable(read(on_ray)) == comparable(read(local))
    assert sorted(map(json.dumps, map(comparable, runs_lines(on_ray)))) == sorted(map(json.dumps, map(comparable, runs_lines(local))))
    assert (on_ray / "report.html").read_text().startswith("<!doctype html>")
    # A local batch finished on Ray: only the missing trials run there.
    mixed = tmp_path / "mixed"
    assert main([*base, "--trials", "1", "--out", str(mixed)]) == 0
    first = json.loads(capsys.readouterr().out)
    assert main([*args, "--out", str(mixed), "--resume", *ray_args]) == 0
    resumed = json.loads(capsys.readouterr().out)
    assert resumed["ran"] == first["runs"] and resumed["runs"] == 2 * first["runs"]
    assert comparable(read(mixed))["summary"] == comparable(read(local))["summary"]


@pytest.mark.slow
async def test_a_killed_worker_costs_only_its_in_flight_runs_which_are_retried(ray_cluster: str, tmp_path: Path) -> None:
    expected = await local_batch(tmp_path / "local", trials=2)
    backend = RayBackend(RunSpec(model="scripted", latency_s=0.2), address=ray_cluster, workers=2, worker_concurrency=2)
    options = RunOptions(model=script_model)  # unused: the workers build theirs from the spec
    batch = asyncio.ensure_future(run_batch(collect_scenarios([EXAMPLES]), options, tmp_path / "ray", trials=2,
                                            progress=False, config={"model": "scripted"}, backend=backend))
    killed = await kill_a_busy_worker(backend, batch)
    result = await batch
    assert killed and result.complete
    assert backend.workers_lost == 1 and backend.retried == len(killed)
    lines = runs_lines(tmp_path / "ray")
    assert sorted(r["key"] for r in lines) == sorted(r["key"] for r in expected["runs"])  # none lost, none twice
    assert comparable(read(tmp_path / "ray")) == comparable(expected)


@pytest.mark.slow
async def test_runs_past_the_retry_limit_are_infrastructure_errors_outside_pass_k(ray_cluster: str, tmp_path: Path) -> None:
    scenarios = collect_scenarios([EXAMPLES])
    backend = RayBackend(RunSpec(model="scripted", latency_s=0.2), address=ray_cluster, workers=2,
                         worker_concurrency=2, max_retries=0)
    batch = asyncio.ensure_future(run_batch(scenarios, RunOptions(model=script_model), tmp_path, trials=2,
                                            progress=False, config={"model": "scripted"}, backend=backend))
    killed = await kill_a_busy_worker(backend, batch)
    result = await batch
    summary = result.summary
    lost = summary["infrastructure_errors"]["keys"]
    assert lost and set(lost) <= set(killed) and backend.retried == 0
    assert summary["runs"] == 2 * len(scenarios) and len(runs_lines(tmp_path)) == summary["runs"]
    assert summary["graded_runs"] == summary["runs"] - len(lost) and summary["success_rate"] == 1.0
    assert summary["terminations"]["worker_lost"] == len(lost)
    record = next(r for r in result.records if r["key"] == lost[0])
    assert record["infrastructure_error"] and "worker died under the run 1 time(s)" in record["trajectory"]["termination_detail"]
    # pass^k counts only graded trials: a scenario whose trial was lost has one trial left.
    assert summary["pass_k"][1] == 1.0


def test_ray_options_need_the_ray_backend(capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["run", str(EXAMPLES), "--model", "scripted", "--workers", "2", "--no-progress"])
    assert rc == 2 and "--workers: only with --backend ray" in capsys.readouterr().err
    rc = main(["run", str(EXAMPLES), "--model", "scripted", "--backend", "ray", "--workers", "0", "--no-progress"])
    assert rc == 2 and "--workers and --worker-concurrency must be at least 1" in capsys.readouterr().err


async def test_the_delayed_model_waits_then_answers_as_its_inner_model() -> None:
    from agent.messages import Message, ModelRequest
    from agent.models import EchoModel

    model = DelayedModel(EchoModel(), 0.05)
    started = time.perf_counter()
    response = await model.complete(ModelRequest(messages=[Message.user("hi")]))
    assert time.perf_counter() - started >= 0.05 and response.text == "You said: hi" and model.name == "echo"
