"""`rein run --backend ray`: a batch's runs spread over a Ray cluster.

    rein run suite/ --backend ray --ray-address auto --workers 8 --worker-concurrency 4

Each worker is a Ray actor. It builds the run options once from a picklable `RunSpec` (model
names, plug-in names; the embedded model is loaded by the first run and kept for the rest) and
then runs one scenario per call, `worker_concurrency` calls at a time; every run still gets a
fresh environment and Agent, as in a local batch. The driver hands out (scenario, trial) jobs and
passes each finished record to the batch runner, which writes runs.jsonl, results.json and the
report exactly as for a local batch (scenarios/runner.py), so --resume works across backends.

A worker that dies (its process killed, its node lost) costs only the runs it had in flight: each
is queued again for any worker, up to `max_retries` more times, and then recorded once, as a
`worker_lost` infrastructure error that the metrics leave out of pass^k. A dead worker is replaced.
A worker that fails to start (its options builder raised, or Ray could not load the actor class
on a loaded node) is started again, up to `max_retries` more times; only then does the batch
stop, with the cause.

Ray is an optional extra (`pip install 'rein-runtime[ray]'`), imported only here.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from agent.errors import UserFacingError
from agent.messages import ModelRequest, ModelResponse
from agent.models.base import Model
from scenarios.orchestrator import Episode, RunOptions
from scenarios.scenario import Scenario


@dataclass(frozen=True)
class RunSpec:
    """How to run scenarios, as names that a worker can build from (an Agent does not pickle)."""

    model: str
    """The agent's model, as given to --model (`scripted` plays each scenario's agent script)."""
    base_url: str | None = None
    """Base URL of an OpenAI-compatible server for openai:NAME models."""
    user_model: str | None = None
    """Model of simulated users (the agent's own model object when it names the same model)."""
    judge_model: str | None = None
    """Model that judges nl_assertions (None: they are skipped, with a note)."""
    interventions: tuple[str, ...] = ()
    """Intervention plug-ins, by name."""
    mode: str | None = None
    """Mode or mode policy name (None: always agentic)."""
    latency_s: float = 0.0
    """Simulated latency before every model answer (benchmarks of orchestration, bench/scale.py)."""
    builder: Callable[[RunSpec], tuple[RunOptions, Model | None]] | None = None
    """Builds each worker's options and judge instead of `build_run_options`; pickled to the workers."""


class DelayedModel(Model):
    """A model that answers as `inner` does, after a fixed wait (a stand-in for a remote LLM)."""

    def __init__(self, inner: Model, latency_s: float) -> None:
        self.inner = inner
        self.latency_s = latency_s
        self.name = inner.name

    async def complete(self, request: ModelRequest) -> ModelResponse:
        await asyncio.sleep(self.latency_s)
        return await self.inner.complete(request)

    async def aclose(self) -> None:
        await self.inner.aclose()


def build_run_options(spec: RunSpec) -> tuple[RunOptions, Model | None]:
    """The run options and the judge that `rein run` builds for the same settings."""
    from scenarios.orchestrator import script_model
    from scenarios.run_cli import _interventions, _mode, _model

    scripted = spec.model == "scripted"
    model: Any = script_model if scripted else _model(spec.model, spec.base_url)
    user_model = None
    if spec.user_model is not None:
        same = spec.user_model == spec.model and not scripted
        user_model = model if same else _model(spec.user_model, spec.base_url)
    if spec.latency_s > 0:
        model = _delayed_factory(spec.latency_s) if scripted else DelayedModel(model, spec.latency_s)
        if user_model is not None:
            user_model = DelayedModel(user_model, spec.latency_s)
    judge = _model(spec.judge_model, spec.base_url) if spec.judge_model else None
    options = RunOptions(
        model=model,
        user_model=user_model,
        resolve_model=functools.partial(_model, base_url=spec.base_url),
        interventions=_interventions(list(spec.interventions)),
        mode_policy=_mode(spec.mode),
    )
    return options, judge


def _delayed_factory(latency_s: float) -> Callable[[Scenario], Model]:
    from scenarios.orchestrator import script_model

    def build(scenario: Scenario) -> Model:
        return DelayedModel(script_model(scenario), latency_s)

    return build


class ScenarioWorker:
    """The Ray actor: run options built once, then one scenario run per call."""

    def __init__(self, spec: RunSpec) -> None:
        self.options, self.judge = (spec.builder or build_run_options)(spec)

    async def ready(self) -> int:
        """The worker's process id, once it is built."""
        return os.getpid()

    async def run(self, scenario: Scenario, trial: int, scenario_hash: str) -> dict[str, Any]:
        """One run and its grade, as a results record."""
        from scenarios.runner import run_one

        return await run_one(scenario, trial, self.options, judge=self.judge, scenario_hash=scenario_hash)


@dataclass
class _Worker:
    handle: Any
    generation: int = 0
    pid: int | None = None
    in_flight: set[str] = field(default_factory=set)


@dataclass
class RayBackend:
    """Runs a batch's jobs on Ray actors (the runner's `backend`)."""

    spec: RunSpec
    """What each worker builds."""
    address: str | None = None
    """`auto`, `ray://HOST:PORT`, `HOST:PORT`, or None to start a Ray instance on this machine."""
    workers: int = 2
    """Number of actors."""
    worker_concurrency: int = 1
    """Runs at a time in each actor."""
    max_retries: int = 2
    """How many more times a run is tried after its worker died under it."""
    retried: int = 0
    """Runs queued again after a worker died (so far)."""
    workers_lost: int = 0
    """Workers that died and were replaced (so far)."""
    start_failures: int = 0
    """Workers that failed to start before the batch began and were started again (so far)."""
    _pool: list[_Worker] = field(default_factory=list, repr=False)

    def __post_init__(self) -> None:
        if self.workers < 1 or self.worker_concurrency < 1 or self.max_retries < 0:
            raise UserFacingError("--workers and --worker-concurrency must be at least 1, --ray-retries at least 0")

    def progress_note(self) -> str:
        """Workers, retries and lost workers, for the progress bar."""
        note = f"workers={self.workers}"
        if self.retried or self.workers_lost:
            note += f" retried={self.retried} lost={self.workers_lost}"
        if self.start_failures:
            note += f" restarted={self.start_failures}"
        return note

    def in_flight(self) -> dict[int, list[str]]:
        """Process id of each started worker → keys of the runs it has in flight."""
        return {w.pid: sorted(w.in_flight) for w in self._pool if w.pid is not None}

    async def run(
        self,
        jobs: Sequence[tuple[Scenario, int]],
        prints: dict[str, str],
        finished: Callable[[dict[str, Any]], None],
    ) -> None:
        """Run every job once on the cluster, calling `finished` with each record as it ends."""
        ray = import_ray()
        connected_here = not ray.is_initialized()
        if connected_here:
            connect(ray, self.address)
        try:
            await self._run(ray, list(jobs), prints, finished)
        finally:
            for w in self._pool:
                with contextlib.suppress(Exception):
                    ray.kill(w.handle, no_restart=True)
            self._pool = []
            if connected_here:
                ray.shutdown()

    async def _run(
        self, ray: Any, jobs: list[tuple[Scenario, int]], prints: dict[str, str], finished: Callable[[dict[str, Any]], None]
    ) -> None:
        self._pool = [_Worker(self._spawn(ray)) for _ in range(self.workers)]
        await asyncio.gather(*(self._start(ray, w) for w in self._pool))
        if not jobs:
            return
        queue: asyncio.Queue[tuple[Scenario, int, int] | None] = asyncio.Queue()
        for scenario, trial in jobs:
            queue.put_nowait((scenario, trial, 1))
        slots = self.workers * self.worker_concurrency
        left = len(jobs)

        async def slot(w: _Worker) -> None:
            nonlocal left
            while (job := await queue.get()) is not None:
                scenario, trial, attempt = job
                key = f"{scenario.id}#{trial}"
                handle, generation = w.handle, w.generation
                w.in_flight.add(key)
                try:
                    record = await handle.run.remote(scenario, trial, prints[scenario.id])
                except ray.exceptions.RayError as exc:
                    record = None
                    if isinstance(exc, ray.exceptions.RayActorError) and w.generation == generation:
                        self._replace(ray, w)
                    if attempt <= self.max_retries:
                        self.retried += 1
                        queue.put_nowait((scenario, trial, attempt + 1))
                        continue
                    record = await lost_record(scenario, trial, prints[scenario.id], attempt, exc)
                finally:
                    w.in_flight.discard(key)
                finished(record)
                left -= 1
                if left == 0:
                    for _ in range(slots):
                        queue.put_nowait(None)

        tasks = [asyncio.ensure_future(slot(w)) for w in self._pool for _ in range(self.worker_concurrency)]
        try:
            await asyncio.gather(*tasks)
        finally:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    def _spawn(self, ray: Any) -> Any:
        actor = ray.remote(ScenarioWorker).options(
            max_concurrency=self.worker_concurrency,
            # Place actors on as many nodes as possible: a lost node then costs few workers.
            scheduling_strategy="SPREAD",
            max_restarts=0,
        )
        return actor.remote(self.spec)

    async def _start(self, ray: Any, w: _Worker) -> None:
        """Wait until the worker is built; one that fails to start is started again, like a lost
        worker, up to `max_retries` more times (a loaded node can fail an actor's start-up once)."""
        for attempt in range(1, self.max_retries + 2):
            try:
                w.pid = await w.handle.ready.remote()
                return
            except ray.exceptions.RayError as exc:
                if attempt > self.max_retries:
                    raise UserFacingError(
                        f"--backend ray: a worker could not start ({attempt} tries): {_cause(exc)}"
                    ) from None
                logging.getLogger("rein.ray").warning("a worker failed to start, starting another: %s", _cause(exc))
                self.start_failures += 1
                with contextlib.suppress(Exception):
                    ray.kill(w.handle, no_restart=True)
                w.handle = self._spawn(ray)

    def _replace(self, ray: Any, w: _Worker) -> None:
        """A fresh actor in place of a dead one; its slots go on with the new handle."""
        with contextlib.suppress(Exception):
            ray.kill(w.handle, no_restart=True)
        self.workers_lost += 1
        w.handle, w.generation, w.pid = self._spawn(ray), w.generation + 1, None
        generation = w.generation

        async def learn_pid() -> None:
            with contextlib.suppress(Exception):
                pid = await w.handle.ready.remote()
                if w.generation == generation:
                    w.pid = pid

        asyncio.ensure_future(learn_pid())


async def lost_record(scenario: Scenario, trial: int, scenario_hash: str, attempts: int, exc: BaseException) -> dict[str, Any]:
    """The record of a run whose worker died on every try: a `worker_lost` infrastructure error."""
    from scenarios.grading import evaluate
    from scenarios.runner import make_record
    from scenarios.trajectory import Trajectory

    t = Trajectory(scenario_id=scenario.id, trial=trial, seed=scenario.seed + trial, domain=scenario.domain)
    t.termination = "worker_lost"
    t.termination_detail = f"the worker died under the run {attempts} time(s); last: {type(exc).__name__}: {_first_line(exc)}"
    episode = Episode(t, None)
    breakdown = await evaluate(scenario, episode)
    return make_record(scenario, trial, episode, breakdown, scenario_hash=scenario_hash)


def import_ray() -> Any:
    """The ray module, or a message saying how to install it."""
    try:
        import ray
    except ImportError:
        raise UserFacingError("--backend ray needs Ray: pip install 'rein-runtime[ray]'") from None
    return ray


def connect(ray: Any, address: str | None) -> None:
    """Join the cluster at `address` (or start Ray on this machine when None)."""
    # Workers' output stays in the cluster's logs: the driver's stdout may carry --json.
    common: dict[str, Any] = {"log_to_driver": False, "logging_level": logging.WARNING}
    try:
        if address is None:
            ray.init(include_dashboard=False, **common)
        else:
            ray.init(address=address, **common)
    except (ConnectionError, ValueError, RuntimeError) as exc:
        raise UserFacingError(f"--ray-address {address}: cannot connect to Ray ({_first_line(exc)})") from None


_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _first_line(exc: BaseException) -> str:
    text = _ANSI.sub("", str(exc)).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _cause(exc: BaseException) -> str:
    """What went wrong in a Ray error: its first line, and the exception that ends a traceback in it
    (an actor whose constructor raised carries the remote traceback in its message)."""
    lines = _ANSI.sub("", str(exc)).strip().splitlines()
    frames = [i for i, line in enumerate(lines) if line.startswith("  File ")]
    if not frames:
        return _first_line(exc)
    tail = [line for line in lines[frames[-1] + 1 :] if line and not line.startswith(" ")]
    return f"{tail[0]} ({lines[0]})" if tail else lines[0]
