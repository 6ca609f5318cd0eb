"""The error-recovery suite under each intervention: none, rein, npi (and self-refine on request).

    python bench/recovery.py                                   # embedded model, full suite, none/rein/npi
    python bench/recovery.py --limit 14 --interventions none,rein,npi,self-refine
    python bench/recovery.py --model echo --limit 3            # smoke run, no model weights

The suite is scenarios/recovery/suite.yaml (python -m scenarios.recovery.build): tau2 test-split
retail and airline tasks with an injected error turn at the opening, after the user identified,
or after a read tool's answer (seen: vague reference, ambiguous interpretation, unsupported
operation, unsupported parameter; unseen: contradiction, unsupported domain), clarify-then-act
dialogues, and error-free controls. An error run succeeds when the agent's first recovery call is
the right one, on the error turn, and the DB ends as required; a control, when it writes nothing
and calls no recovery tool. Runs whose model failed are infrastructure errors, counted apart.
--tags retail keeps the scenarios carrying every named tag (a domain, control, position:after_read),
--ids the named scenarios; --limit N then keeps the first N, which cover the types in turn. Each
arm is one batch (scenarios.runner.run_batch) in OUT/ARM, resumable with --resume; the comparison
table is printed and written to OUT/comparison.md and OUT/comparison.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from agent.errors import UserFacingError  # noqa: E402
from agent.models import DEFAULT_MODEL, resolve_model  # noqa: E402
from agent.plugins import intervention_names, load_intervention  # noqa: E402
from scenarios.loading import load_scenarios  # noqa: E402
from scenarios.orchestrator import RunOptions  # noqa: E402
from scenarios.recovery.build import SUITE_PATH  # noqa: E402
from scenarios.recovery.report import as_json, markdown, summarize_arm  # noqa: E402
from scenarios.runner import run_batch  # noqa: E402


def arm_options(name: str, model, detector: str, detector_file: Path | None = None, offer: str = "on_plan") -> RunOptions:  # noqa: ANN001
    """Run options of one arm: the shared model and a fresh intervention per run; offer: when the
    diagnosing arms declare their recovery tools (on_plan: only with a plan; always)."""
    if name not in intervention_names():
        raise UserFacingError(f"unknown intervention {name!r}; known: {', '.join(intervention_names())}")
    options: dict[str, object] = {}
    if name in ("rein", "npi"):  # the arms that diagnose turns
        options["detector"] = detector
        options["offer"] = offer
        if detector_file is not None:
            if not detector_file.exists():
                raise UserFacingError(f"detector file {detector_file} does not exist")
            options["detector_file"] = str(detector_file)

    def build() -> list:
        made = load_intervention(name, **options)
        return [made] if made is not None else []

    return RunOptions(model=model, interventions=build)


async def run(args: argparse.Namespace) -> int:
    scenarios = load_scenarios(args.suite)
    # Filters apply before --limit, so a subset (one domain, one position) can be run on its own.
    if args.tags:
        wanted = {t.strip() for t in args.tags.split(",") if t.strip()}
        scenarios = [s for s in scenarios if wanted <= set(s.tags)]
    if args.ids:
        ids = [i.strip() for i in args.ids.split(",") if i.strip()]
        unknown = sorted(set(ids) - {s.id for s in scenarios})
        if unknown:
            raise UserFacingError(f"no such scenario in the selection: {', '.join(unknown)}")
        scenarios = [s for s in scenarios if s.id in ids]
    if args.limit is not None:
        scenarios = scenarios[: args.limit]
    if not scenarios:
        raise UserFacingError("the selection holds no scenario")
    arms = [a.strip() for a in args.interventions.split(",") if a.strip()]
    model = resolve_model(args.model, **({"base_url": args.base_url} if args.base_url else {}))
    out = Path(args.out)
    summaries = []
    for arm in arms:
        started = time.perf_counter()
        result = await run_batch(
            scenarios,
            arm_options(arm, model, args.detector, args.detector_file, args.offer),
            out / arm,
            resume=args.resume,
            config={"model": args.model, "intervention": arm, "detector": args.detector, "offer": args.offer, "suite": str(args.suite),
                    "detector_file": str(args.detector_file or "")},
            progress=not args.no_progress,
        )
        summaries.append(summarize_arm(arm, result.records))
        print(f"{arm}: {len(result.records)} runs in {time.perf_counter() - started:.0f}s -> {out / arm}", file=sys.stderr)
    table = markdown(summaries)
    chosen = "".join(f", {flag} {value}" for flag, value in (("tags", args.tags), ("ids", args.ids), ("limit", args.limit)) if value)
    header = f"Model {args.model}, {len(scenarios)} scenarios from {args.suite}{chosen}, detector {args.detector}, offer {args.offer}.\n\n"
    (out / "comparison.md").write_text(header + table + "\n", encoding="utf-8")
    (out / "comparison.json").write_text(json.dumps(as_json(summaries), indent=1) + "\n", encoding="utf-8")
    print(header + table)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default=DEFAULT_MODEL, help=f"agent model (default {DEFAULT_MODEL})")
    parser.add_argument("--base-url", default=None, help="base URL of an OpenAI-compatible server for openai:NAME models")
    parser.add_argument("--limit", type=int, default=None, help="run only the first N scenarios of the suite")
    parser.add_argument("--tags", default=None, help="keep scenarios carrying every one of these comma-separated tags (e.g. retail)")
    parser.add_argument("--ids", default=None, help="keep only these comma-separated scenario ids")
    parser.add_argument("--interventions", default="none,rein,npi", help="comma-separated arms (none, rein, npi, self-refine)")
    parser.add_argument("--detector", default="offline", choices=["offline", "llm", "cascade"], help="inception module of rein and npi")
    parser.add_argument("--offer", default="on_plan", choices=["on_plan", "always"],
                        help="when rein and npi offer their recovery tools: with a plan only (default), or always")
    parser.add_argument("--detector-file", type=Path, default=None,
                        help="the offline detector's classifier .npz for rein and npi (default: the shipped one)")
    parser.add_argument("--suite", type=Path, default=SUITE_PATH, help="suite file")
    parser.add_argument("--out", default="rein-results/recovery", help="output folder (one sub-folder per arm)")
    parser.add_argument("--resume", action="store_true", help="finish the batches in --out")
    parser.add_argument("--no-progress", action="store_true")
    args = parser.parse_args(argv)
    try:
        return asyncio.run(run(args))
    except UserFacingError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
