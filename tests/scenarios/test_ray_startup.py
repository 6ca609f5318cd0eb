"""`rein run --backend ray` start-up, on the real two-node loopback cluster of test_ray_backend.py:
a worker whose start-up fails is started again (and the batch still matches a local one), one that
never starts fails the batch clearly, and each actor builds its run options (and so its model)
once, however many scenarios it runs."""

from __future__ import annotations

import collections
import functools
import os
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agent.errors import UserFacingError
from agent.models.base import Model
from scenarios.loading import collect_scenarios
from scenarios.orchestrator import RunOptions, script_model
from scenarios.ray_backend import RayBackend, RunSpec, build_run_options
from scenarios.runner import run_batch
from scenarios.scenario import Scenario
from tests.scenarios.test_ray_backend import (  # noqa: F401  (ray_cluster is a fixture)
    EXAMPLES,
    comparable,
    local_batch,
    ray_cluster,
    read,
    runs_lines,
)


@pytest.fixture(autouse=True)
def pickled_by_value() -> Iterator[None]:
    """The builders below travel to the workers by value: Ray's workers cannot import this file."""
    ray = pytest.importorskip("ray", reason="Ray is not installed (pip install 'rein-runtime[ray]')")
    module = sys.modules[__name__]
    ray.cloudpickle.register_pickle_by_value(module)
    try:
        yield
    finally:
        ray.cloudpickle.unregister_pickle_by_value(module)


def fail_first_build(marker: str, spec: RunSpec) -> tuple[RunOptions, Model | None]:
    """Options as `rein run` builds them, except that the first build of the batch raises."""
    try:
        os.close(os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return build_run_options(spec)
    raise RuntimeError("start-up failed on purpose (first build)")


def never_build(calls: str, spec: RunSpec) -> tuple[RunOptions, Model | None]:
    """A worker that cannot start: every build raises, after leaving a file behind to count it."""
    Path(calls, uuid.uuid4().hex).touch()
    raise RuntimeError("no model here")


class CountingScripts:
    """The per-actor stand-in for a loaded model: built once with the options, it logs its birth
    and every run that uses it (pid, and its own id) to a file."""

    def __init__(self, log: str) -> None:
        self.log = log
        self._write("built")

    def _write(self, what: str) -> None:
        with open(self.log, "a") as f:
            f.write(f"{what} {os.getpid()} {id(self)}\n")

    def __call__(self, scenario: Scenario) -> Model:
        self._write("run")
        return script_model(scenario)


def counting_build(log: str, spec: RunSpec) -> tuple[RunOptions, Model | None]:
    options, judge = build_run_options(spec)
    options.model = CountingScripts(log)
    return options, judge


def batch(backend: RayBackend, out: Path, trials: int) -> Any:
    return run_batch(collect_scenarios([EXAMPLES]), RunOptions(model=script_model), out, trials=trials,
                     progress=False, config={"model": "scripted"}, backend=backend)


@pytest.mark.slow
async def test_a_worker_whose_start_up_fails_is_started_again_and_the_batch_matches_a_local_one(
    ray_cluster: str, tmp_path: Path  # noqa: F811
) -> None:
    expected = await local_batch(tmp_path / "local", trials=2)
    marker = tmp_path / "failed-once"
    spec = RunSpec(model="scripted", builder=functools.partial(fail_first_build, str(marker)))
    backend = RayBackend(spec, address=ray_cluster, workers=2, worker_concurrency=2)
    result = await batch(backend, tmp_path / "ray", trials=2)
    assert marker.exists(), "no build ever failed: the test proved nothing"
    assert result.complete and backend.start_failures == 1
    assert backend.workers_lost == 0 and backend.retried == 0
    assert sorted(r["key"] for r in runs_lines(tmp_path / "ray")) == sorted(r["key"] for r in expected["runs"])
    assert comparable(read(tmp_path / "ray")) == comparable(expected)
    assert "restarted=1" in backend.progress_note()


@pytest.mark.slow
async def test_a_worker_that_never_starts_fails_the_batch_clearly_after_the_retries(
    ray_cluster: str, tmp_path: Path  # noqa: F811
) -> None:
    calls = tmp_path / "calls"
    calls.mkdir()
    spec = RunSpec(model="scripted", builder=functools.partial(never_build, str(calls)))
    backend = RayBackend(spec, address=ray_cluster, workers=1, max_retries=2)
    with pytest.raises(UserFacingError) as caught:
        await batch(backend, tmp_path / "ray", trials=1)
    message = str(caught.value)
    assert message.startswith("--backend ray: a worker could not start (3 tries): RuntimeError: no model here")
    assert "\n" not in message and "\x1b" not in message
    assert len(list(calls.iterdir())) == 3 and backend.start_failures == 2
    assert runs_lines(tmp_path / "ray") == []  # no run was recorded, failed or otherwise


@pytest.mark.slow
async def test_each_actor_builds_its_options_and_model_once_across_many_scenarios(
    ray_cluster: str, tmp_path: Path  # noqa: F811
) -> None:
    log = tmp_path / "builds.log"
    spec = RunSpec(model="scripted", latency_s=0.05, builder=functools.partial(counting_build, str(log)))
    backend = RayBackend(spec, address=ray_cluster, workers=2, worker_concurrency=2)
    result = await batch(backend, tmp_path / "ray", trials=4)
    assert result.complete and result.summary["success_rate"] == 1.0
    entries = [line.split() for line in log.read_text().splitlines()]
    builds = collections.Counter(pid for what, pid, _ in entries if what == "built")
    runs = collections.Counter(pid for what, pid, _ in entries if what == "run")
    assert len(builds) == 2 and set(builds.values()) == {1}, builds  # one build in each of the two actors
    assert set(runs) <= set(builds) and sum(runs.values()) == result.summary["runs"] == len(result.records)
    assert max(runs.values()) > 1  # an actor ran several scenarios on its one build
    # Every run of an actor used the one model object built with its options.
    objects = {pid: {obj for what, p, obj in entries if p == pid} for pid in builds}
    assert all(len(ids) == 1 for ids in objects.values()), objects


def test_the_cause_of_a_failed_start_is_its_remote_exception() -> None:
    from scenarios.ray_backend import _cause

    remote = Exception(
        "The actor died because of an error raised in its creation task, \x1b[36mray::ScenarioWorker.__init__()"
        "\x1b[39m (pid=1, ip=127.0.0.2)\n  File \"/x.py\", line 3, in __init__\n    raise RuntimeError(\"boom\")\n"
        "RuntimeError: boom\nsecond line"
    )
    assert _cause(remote) == (
        "RuntimeError: boom (The actor died because of an error raised in its creation task, "
        "ray::ScenarioWorker.__init__() (pid=1, ip=127.0.0.2))"
    )
    assert _cause(Exception("no traceback here\nmore")) == "no traceback here"
