"""`rein run`: run scenario files (or tau2 tasks.json files) and write results and a report.

    rein run scenarios/examples/                      # the embedded local model
    rein run scenarios/examples/ --model scripted     # each scenario's agent script, no LLM
    rein run tasks.json --model openai:gpt-4o-mini --trials 4 --concurrency 8 --out runs/a
    rein run tasks.json --inject unsupported_domain --intervention rein --out runs/b
    rein run … --out runs/b --resume                  # finish an interrupted batch
    rein run … --backend ray --ray-address auto --workers 8   # runs on a Ray cluster
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import sys
from pathlib import Path
from typing import Any, get_args

from agent.errors import UserFacingError
from scenarios.users.error_types import ErrorTypeName

ERROR_TYPE_NAMES: tuple[ErrorTypeName, ...] = get_args(ErrorTypeName)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of `rein run`."""
    parser.add_argument("paths", nargs="+", metavar="PATH", help="scenario files (.yaml/.yml/.json), tau2 tasks.json files, or folders of them")
    parser.add_argument("--model", default=None, help="agent model: local:NAME (default local:qwen2.5-coder-1.5b), openai:NAME, echo, or scripted (each scenario's agent.script)")
    parser.add_argument("--base-url", default=None, help="base URL of an OpenAI-compatible server for openai:NAME models")
    parser.add_argument("--user-model", default=None, help="model of simulated users (default: the agent's model; none with --model scripted)")
    parser.add_argument("--judge-model", default=None, help="model that judges nl_assertions (without one they are skipped, with a note)")
    parser.add_argument("--trials", type=int, default=1, help="runs per scenario (pass^k uses them); default 1")
    parser.add_argument("--concurrency", type=int, default=1, help="runs at a time; default 1")
    parser.add_argument("--out", default=None, help="output folder (default rein-results/TIMESTAMP)")
    parser.add_argument("--resume", action="store_true", help="finish the batch in --out, skipping finished runs")
    parser.add_argument("--intervention", action="append", default=[], metavar="NAME", help="intervention plug-in (none, rein, npi, self-refine); repeatable")
    parser.add_argument("--mode", default=None, help="mode or mode policy: instant, reasoning, agentic (default), self, offline, cost")
    parser.add_argument("--inject", action="append", default=[], metavar="TYPE", help=f"also run each scenario with this user error injected: {', '.join(ERROR_TYPE_NAMES)}, or all; repeatable")
    parser.add_argument("--inject-turn", type=int, default=0, help="user turn at which --inject errors are sent (default 0, the opening message)")
    parser.add_argument("--domain", default=None, help="domain of tau2 tasks that do not name theirs (mock's)")
    parser.add_argument("--ids", nargs="+", default=None, metavar="ID", help="run only these scenario ids")
    parser.add_argument("--limit", type=int, default=None, help="run only the first N scenarios")
    parser.add_argument("--json", action="store_true", help="print the summary as one JSON object")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    ray = parser.add_argument_group("distributed runs (--backend ray; needs the ray extra)")
    ray.add_argument("--backend", choices=("local", "ray"), default="local", help="where runs execute: this process (default) or Ray actors")
    ray.add_argument("--ray-address", default=None, metavar="ADDRESS", help="Ray cluster to join: auto, ray://HOST:PORT or HOST:PORT (default: start Ray on this machine)")
    ray.add_argument("--workers", type=int, default=None, metavar="N", help="Ray actors, each building its models once (default 2)")
    ray.add_argument("--worker-concurrency", type=int, default=None, metavar="N", help="runs at a time in each actor (default 1)")
    ray.add_argument("--ray-retries", type=int, default=None, metavar="N", help="tries left to a run whose worker died before it is an infrastructure error (default 2)")


def run(args: argparse.Namespace) -> int:
    """Run the batch; exit status 0 when every run finished (whatever their rewards)."""
    from agent.models import DEFAULT_MODEL
    from scenarios.loading import collect_scenarios
    from scenarios.orchestrator import RunOptions, script_model
    from scenarios.runner import run_batch, with_injected_errors
    from scenarios.scenario import SimulatedUserConfig

    if args.trials < 1 or args.concurrency < 1:
        raise UserFacingError("--trials and --concurrency must be at least 1")
    if args.resume and not args.out:
        raise UserFacingError("--resume needs --out (the folder of the batch to finish)")
    scenarios = collect_scenarios(args.paths, domain=args.domain)
    _check_domains(scenarios)
    if args.ids:
        missing = sorted(set(args.ids) - {s.id for s in scenarios})
        if missing:
            raise UserFacingError(f"--ids: no scenario with id {', '.join(missing)}")
        scenarios = [s for s in scenarios if s.id in set(args.ids)]
    if args.limit is not None:
        scenarios = scenarios[: max(args.limit, 0)]
    inject = _inject_types(args.inject)
    if inject:
        scenarios = scenarios + with_injected_errors(scenarios, inject, args.inject_turn)
    if not scenarios:
        raise UserFacingError("no scenarios to run")

    model_name = args.model or DEFAULT_MODEL
    scripted = model_name == "scripted"
    if scripted:
        # A jigsaw scenario needs no script: --model scripted plays it with the scripted solver.
        unscripted = [s.id for s in scenarios if s.agent.script is None and s.kind != "jigsaw"]
        if unscripted:
            raise UserFacingError(f"--model scripted needs agent.script in every scenario; missing in: {', '.join(unscripted[:5])}")
    model: Any = script_model if scripted else _model(model_name, args.base_url)
    user_name = args.user_model or (None if scripted else model_name)
    user_model = None
    if user_name is not None:
        user_model = model if user_name == model_name and not scripted else _model(user_name, args.base_url)
    needs_user = [s.id for s in scenarios if isinstance(s.user, SimulatedUserConfig) and s.user.model is None]
    if needs_user and user_model is None:
        raise UserFacingError(f"simulated users need --user-model (scenarios: {', '.join(needs_user[:5])})")
    judge = _model(args.judge_model, args.base_url) if args.judge_model else None

    names = [n for n in args.intervention if n != "none"]
    factory = _interventions(names)
    mode_policy = _mode(args.mode)
    options = RunOptions(
        model=model,
        user_model=user_model,
        resolve_model=lambda name: _model(name, args.base_url),
        interventions=factory,
        mode_policy=mode_policy,
    )
    out = Path(args.out) if args.out else Path("rein-results") / dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    config = {
        "model": model_name,
        "base_url": args.base_url,
        "user_model": user_name,
        "judge_model": args.judge_model,
        "interventions": names,
        "mode": args.mode,
        "inject": inject,
        "inject_turn": args.inject_turn if inject else None,
        "trials": args.trials,
        "concurrency": args.concurrency,
    }
    result = asyncio.run(
        run_batch(
            scenarios,
            options,
            out,
            trials=args.trials,
            concurrency=args.concurrency,
            resume=args.resume,
            judge=judge,
            config=config,
            progress=not args.no_progress,
            backend=_backend(args, model_name, user_name, names),
        )
    )
    summary = result.summary
    if args.json:
        print(json.dumps({"out": str(out), "ran": result.ran, "complete": result.complete, **summary, "files": result.files}))
    else:
        _print_summary(summary, result.files, result.ran)
    return 0


def _backend(args: argparse.Namespace, model_name: str, user_name: str | None, interventions: list[str]) -> Any:
    """The Ray backend for --backend ray (None: runs in this process, as before)."""
    ray_only = {"--ray-address": args.ray_address, "--workers": args.workers,
                "--worker-concurrency": args.worker_concurrency, "--ray-retries": args.ray_retries}
    if args.backend != "ray":
        given = [name for name, value in ray_only.items() if value is not None]
        if given:
            raise UserFacingError(f"{', '.join(given)}: only with --backend ray")
        return None
    from scenarios.ray_backend import RayBackend, RunSpec, import_ray

    import_ray()  # fail before the batch folder is touched when Ray is not installed
    spec = RunSpec(model=model_name, base_url=args.base_url, user_model=user_name, judge_model=args.judge_model,
                   interventions=tuple(interventions), mode=args.mode)
    return RayBackend(spec, address=args.ray_address, workers=2 if args.workers is None else args.workers,
                      worker_concurrency=args.worker_concurrency or 1,
                      max_retries=2 if args.ray_retries is None else args.ray_retries)


def _check_domains(scenarios: list[Any]) -> None:
    """Refuse the batch before it starts when a scenario names a domain nothing provides.

    Otherwise every run of that scenario would end in setup_error, and the batch would still
    "succeed" with exit status 0.
    """
    from scenarios.domains import DOMAINS
    from tools.registry import toolkit_names

    toolkits = [n for n in toolkit_names() if n not in DOMAINS]
    for s in scenarios:
        # A "module:attribute" domain is a toolkit path, checked when the run loads it.
        if s.kind == "jigsaw" or s.domain in DOMAINS or s.domain in toolkits or ":" in s.domain:
            continue
        where = f"{s.source}: " if s.source else ""
        raise UserFacingError(
            f"{where}scenario {s.id!r}: unknown domain {s.domain!r}; known: {', '.join(DOMAINS)} "
            f"(or a toolkit name for tools only: {', '.join(toolkits)})"
        )


def _inject_types(values: list[str]) -> list[ErrorTypeName]:
    out: list[ErrorTypeName] = []
    for v in values:
        for name in ERROR_TYPE_NAMES if v == "all" else [v]:
            if name not in ERROR_TYPE_NAMES:
                raise UserFacingError(f"--inject: unknown error type {name!r}; known: {', '.join(ERROR_TYPE_NAMES)}, all")
            if name not in out:
                out.append(name)
    return out


def _model(name: str, base_url: str | None) -> Any:
    from agent.models import resolve_model
    from agent.models.base import ModelError

    options = {"base_url": base_url} if base_url and name.startswith("openai:") else {}
    try:
        return resolve_model(name, **options)
    except (ModelError, ImportError, ValueError, OSError) as exc:
        raise UserFacingError(f"model {name!r}: {exc}") from None


def _interventions(names: list[str]) -> Any:
    from agent.plugins import load_intervention

    for name in names:  # fail before the batch starts, with the plug-in's own message
        try:
            load_intervention(name)
        except UserFacingError:
            raise
        except Exception as exc:  # a plug-in that is not installed or cannot start
            raise UserFacingError(f"--intervention {name}: cannot load it ({type(exc).__name__}: {exc})") from None

    def build() -> list[Any]:
        return [i for i in (load_intervention(n) for n in names) if i is not None]

    return build


def _mode(name: str | None) -> Any:
    if name is None:
        return None
    from agent.plugins import load_mode_policy

    try:
        return load_mode_policy(name)
    except UserFacingError:
        raise
    except Exception as exc:  # a policy that is not installed or cannot start
        raise UserFacingError(f"--mode {name}: cannot load it ({type(exc).__name__}: {exc})") from None


def _print_summary(summary: dict[str, Any], files: dict[str, str], ran: int) -> None:
    rate = summary.get("success_rate")
    print(f"runs: {summary['runs']} ({ran} run now) · success rate: {'–' if rate is None else f'{rate:.0%}'}"
          f" · mean reward: {summary.get('mean_reward')} · cost: ${summary.get('cost_usd', 0):.4f}")
    width = max((len(k) for k in summary.get("by_scenario", {})), default=8)
    for sid, v in summary.get("by_scenario", {}).items():
        print(f"  {sid:<{width}}  {v['successes']}/{v['runs']}")
    if summary.get("pass_k"):
        print("pass^k: " + ", ".join(f"k={k}: {v:.3f}" for k, v in summary["pass_k"].items()))
    print(f"terminations: {summary.get('terminations')}")
    print(f"results: {files['results.json']}\nreport:  {files['report.html']}", file=sys.stdout)
