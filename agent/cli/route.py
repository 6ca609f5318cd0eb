"""`rein route`: choose a mode for a query, or score a router on a labelled file.

    rein route "What is 15% of 240?" [--router offline|self|cost] [--json]
    rein route eval --data FILE [--router offline|self|cost] [--json]

FILE is JSON Lines with `query` and `mode` on each line (the layout of shared/data/routing), or an
oracle labels file (rows with `runs`, written by `python -m scenarios.routing_tasks.labeling`):

    rein route eval --data labels.jsonl --model NAME [--router offline|self|cost] [--split test]

then it reports, on that split and for that model's runs, agreement with the oracle, accuracy,
cost-of-pass and its cut against reasoning-only, with bootstrap 95% intervals, of each fixed mode,
the oracle, and either the one --router or (without --router) every router: the source-label
offline and cost routers, the ones trained on oracle labels (`python -m agent.routing.train
--labels`), and the self-router from the classification call recorded with each row.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from pathlib import Path
from typing import Any

from agent.errors import UserFacingError

ROUTERS = ("offline", "self", "cost")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = (parser.description or "") + (
        ". Usage: rein route \"QUERY\" | rein route eval --data FILE"
    )
    parser.add_argument("words", nargs="*", metavar="QUERY", help='the query (quote it), or "eval" to score a router')
    parser.add_argument("--router", choices=ROUTERS, default=None,
                        help="router to use (default: offline; on an oracle labels file: compare them all)")
    parser.add_argument("--json", action="store_true", help="print JSON")
    parser.add_argument("--data", type=Path, help="eval: JSONL file with query and mode fields")
    parser.add_argument("--limit", type=int, help="eval: only the first N queries")
    parser.add_argument("--errors", action="store_true", help="eval: also list the misrouted queries")
    parser.add_argument("--model", default=None, help="self router: model that classifies (default: the embedded "
                        "model); oracle eval: whose recorded runs to score")
    parser.add_argument("--split", default="test", help="oracle eval: split to score (default test; 'all' for every row)")
    parser.add_argument("--pass", dest="passes", action="append", metavar="NAME",
                        help="oracle eval: only this labelling pass (greedy, t0.7-seed1, …; repeat for several; "
                        "default: every pass, merged)")
    parser.add_argument("--prompt-weight", type=float, default=1.0, metavar="W",
                        help="oracle eval: count a prompt token as W generated ones (default 1: every token "
                        "alike; 0: generated tokens only; 0.18: the embedded 1.5B's time on one thread)")
    parser.add_argument("--samples", type=int, default=1000, help="oracle eval: bootstrap resamples (default 1000)")
    parser.add_argument("--threshold", type=float, default=None,
                        help="cost router: success threshold (default: the one tuned with the weights, else 0.8)")
    parser.add_argument("--weights", type=Path, default=None, help="offline/cost router: weights file (default: shipped)")
    parser.add_argument("--oracle-weights", type=Path, default=None,
                        help="oracle eval: router trained on oracle labels (default: the one shipped for --model, "
                        "agent/routing/data/oracle_router[.<model>].npz, else the 1.5B's)")


def _build(args: argparse.Namespace) -> Any:
    from agent.routing import CostAwareRouter, OfflineRouter, SelfRouter

    if args.router == "offline":
        return OfflineRouter(args.weights)
    if args.router == "cost":
        try:
            return CostAwareRouter(threshold=args.threshold, weights=args.weights)
        except ValueError as exc:
            raise UserFacingError(str(exc)) from None
    from agent.models import resolve_model

    return SelfRouter(model=resolve_model(args.model))


async def _route_all(router: Any, queries: list[str], kind: str) -> list[dict[str, Any]]:
    from agent.plugin_api import MODES

    if kind in ("offline", "cost"):
        offline = router if kind == "offline" else router._router()
        proba = offline.predict_proba(queries)
        out = []
        for row in proba:
            needs = {m: round(float(p), 4) for m, p in zip(MODES, row, strict=True)}
            decision = router.choose(needs) if kind == "cost" else None
            mode = decision.mode if decision else max(MODES, key=lambda m: needs[m])
            out.append({"mode": mode, "scores": decision.scores if decision else needs})
        return out
    results = []
    for q in queries:
        decision = await router.route(q)
        results.append({"mode": decision.mode, "scores": decision.scores, "reason": decision.reason})
    return results


def _run_eval(args: argparse.Namespace) -> int:
    from agent.routing.router_eval import format_report, load_labeled, score_routes

    if args.data is None:
        raise UserFacingError("route eval needs --data FILE (JSONL with query and mode fields)")
    if args.limit is not None and args.limit < 1:
        raise UserFacingError("--limit must be at least 1")
    if _is_labels_file(args.data):
        return _run_oracle_eval(args)
    rows = load_labeled(args.data)[: args.limit]
    args.router = args.router or "offline"
    router = _build(args)
    routed = asyncio.run(_route_all(router, [r.query for r in rows], args.router))
    report = score_routes([r.mode for r in rows], [r["mode"] for r in routed])
    misrouted = [
        {"query": row.query, "gold": row.mode, "routed": r["mode"], "scores": r["scores"]}
        for row, r in zip(rows, routed, strict=True)
        if row.mode != r["mode"]
    ]
    if args.json:
        out: dict[str, Any] = {"router": args.router, "data": str(args.data), **report.as_dict()}
        if args.errors:
            out["misrouted"] = misrouted
        print(json.dumps(out, indent=2))
    else:
        print(f"router {args.router} on {args.data}")
        print(format_report(report))
        if args.errors:
            print("\nmisrouted:")
            for m in misrouted:
                print(f"  {m['gold']:>9} -> {m['routed']:<9} {m['query'][:100]}")
    return 0


def _is_labels_file(path: Path) -> bool:
    """Whether a data file holds oracle labels (rows with recorded runs) rather than gold modes."""
    try:
        with path.open(encoding="utf-8") as f:
            first = next((line for line in f if line.strip()), "")
        return isinstance(row := json.loads(first), dict) and "runs" in row
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return False


def _run_oracle_eval(args: argparse.Namespace) -> int:
    from agent.routing.aim import aim_summary, format_aim
    from agent.routing.oracle import format_oracle_report, load_oracle, score_oracle

    if args.samples < 10:
        raise UserFacingError("--samples must be at least 10")
    rows = load_oracle(args.data, model=args.model, split=None if args.split == "all" else args.split,
                       passes=args.passes, prompt_weight=args.prompt_weight)[: args.limit]
    notes: list[str] = []
    if args.prompt_weight != 1:
        notes.append(f"tokens count generated tokens plus {args.prompt_weight:g} × prompt tokens (--prompt-weight)")
    if args.router is None:
        routed, spent, more = _compare_all(args, rows)
        notes += more
    else:
        router = _build(args)
        routed = {"routed": [r["mode"] for r in asyncio.run(_route_all(router, [r.query for r in rows], args.router))]}
        spent = {}
    report = score_oracle(rows, routed, router_tokens=spent, samples=args.samples)
    if args.json:
        out: dict[str, Any] = {"router": args.router or "all", "data": str(args.data), "model": args.model,
                               "passes": args.passes or "all", "prompt_weight": args.prompt_weight,
                               "split": args.split, **report.as_dict(), "aim": aim_summary(report, rows),
                               "notes": notes}
        if args.errors:
            out["misrouted"] = {name: [{"id": row.id, "oracle": row.oracle, "routed": m, "query": row.query}
                                       for row, m in zip(rows, picks, strict=True) if row.oracle != m]
                                for name, picks in routed.items()}
        print(json.dumps(out, indent=2))
    else:
        passes = "+".join(args.passes) if args.passes else "all"
        print(f"routers on {args.data} (model {args.model or 'all'}, split {args.split}, passes {passes})")
        print(format_oracle_report(report))
        print()
        print(format_aim(report, rows))
        for note in notes:
            print(f"note: {note}")
    return 0


def _compare_all(args: argparse.Namespace, rows: list[Any]) -> tuple[dict[str, list[str]], dict[str, list[int]], list[str]]:
    """Every router on the rows: the source-label offline and cost routers, the oracle-label ones when
    their weights exist, and the self-router from the classification call recorded with each row."""
    from agent.routing import CostAwareRouter, OfflineRouter
    from agent.routing.oracle_train import oracle_weights_for

    queries = [r.query for r in rows]
    routed: dict[str, list[str]] = {}
    notes: list[str] = []
    source = OfflineRouter(args.weights)
    routed["offline-src"] = [m["mode"] for m in asyncio.run(_route_all(source, queries, "offline"))]
    cost_src = CostAwareRouter(threshold=args.threshold, router=source, success=_default_success(),
                               costs=_default_costs())
    routed["cost-src"] = [m["mode"] for m in asyncio.run(_route_all(cost_src, queries, "cost"))]
    oracle_weights = args.oracle_weights or oracle_weights_for(rows[0].model if rows else None)
    if oracle_weights.is_file():
        trained = OfflineRouter(oracle_weights)
        if trained.weights.meta.get("model") not in (None, *(r.model for r in rows[:1])):
            notes.append(f"{oracle_weights} was trained on {trained.weights.meta['model']}'s labels")
        routed["offline-oracle"] = [m["mode"] for m in asyncio.run(_route_all(trained, queries, "offline"))]
        cost = CostAwareRouter(threshold=args.threshold, router=trained)
        routed["cost-oracle"] = [m["mode"] for m in asyncio.run(_route_all(cost, queries, "cost"))]
        tuned = "" if args.threshold is not None else " (tuned on the validation split)"
        notes.append(f"cost-oracle threshold {cost.threshold:g}{tuned}")
    else:
        notes.append(f"no oracle-label router at {oracle_weights}: train one with "
                     "`python -m agent.routing.train --labels FILE`")
    _family_router(args, rows, routed, notes)
    spent: dict[str, list[int]] = {}
    recorded = [r.extra.get("self_route") for r in rows]
    if all(isinstance(x, dict) and x.get("mode") in ("instant", "reasoning", "agentic") for x in recorded):
        routed["self"] = [x["mode"] for x in recorded]
        spent["self"] = [_weighted(x, args.prompt_weight) for x in recorded]
    else:
        missing = sum(not isinstance(x, dict) for x in recorded)
        notes.append(f"self-router left out: {missing} of {len(rows)} rows have no recorded classification call "
                     "(rows labelled before it was recorded); score it live with --router self --model NAME")
    return routed, spent, notes


def _weighted(call: dict[str, Any], prompt_weight: float) -> int:
    """A recorded classification call's tokens, its prompt tokens counted at `prompt_weight`."""
    from agent.routing.oracle import weighted_tokens

    return round(weighted_tokens(int(call.get("tokens", 0)), int(call.get("output_tokens", 0)), prompt_weight))


def _family_router(args: argparse.Namespace, rows: list[Any], routed: dict[str, list[str]], notes: list[str]) -> None:
    """`family-val`: each task family sent to one mode, chosen on the validation split's recorded runs
    (`agent.routing.aim.family_policy`). Scored only off the validation split, where it would see its answers."""
    from agent.routing.aim import best_fixed_mode, family_policy
    from agent.routing.oracle import load_oracle

    if args.split in ("validation", "all") or not rows or not all("family" in r.extra for r in rows):
        return
    try:
        validation = load_oracle(args.data, model=args.model, split="validation", passes=args.passes,
                                 prompt_weight=args.prompt_weight)
    except UserFacingError:
        notes.append("family-val left out: the labels have no validation rows to choose each family's mode on")
        return
    groups = family_policy(validation)
    if groups is None:
        notes.append("family-val left out: no routing by family keeps the aim's accuracy on the validation split")
        return
    fallback = best_fixed_mode(validation)
    routed["family-val"] = [groups.get(str(r.extra["family"]), fallback) for r in rows]
    chosen = ", ".join(f"{family} {mode}" for family, mode in groups.items())
    unseen = sorted({str(r.extra["family"]) for r in rows} - groups.keys())
    if unseen:
        chosen += f"; {', '.join(unseen)}, which validation lacks: {fallback}"
    notes.append(f"family-val reads each task's family from its row and sends it to the mode chosen on the "
                 f"validation split ({chosen})")


def _default_success() -> dict[str, dict[str, float]]:
    from agent.routing.cost import default_success

    return default_success()


def _default_costs() -> Any:
    from agent.routing.cost import DEFAULT_MODE_COSTS

    return DEFAULT_MODE_COSTS


def run(args: argparse.Namespace) -> int:
    words = list(args.words)
    if words[:1] == ["eval"] and len(words) == 1:
        return _run_eval(args)
    if args.data is not None:
        raise UserFacingError('--data is for `rein route eval`; to route a query, pass it in quotes')
    query = " ".join(words).strip()
    if not query:
        raise UserFacingError('give a query: rein route "QUERY" (or: rein route eval --data FILE)')
    args.router = args.router or "offline"
    router = _build(args)
    if args.router == "cost":
        out: dict[str, Any] = {"query": query, "router": "cost", **router.details(query)}
    else:
        decision = asyncio.run(router.route(query))
        out = {"query": query, "router": args.router, "mode": decision.mode, "reason": decision.reason,
               "scores": decision.scores}
    if args.json:
        print(json.dumps(out, indent=2))
        return 0
    print(f"mode: {out['mode']}")
    print(f"router: {args.router} ({out['reason']})")
    scores = out.get("needs") or out.get("scores") or {}
    if scores:
        label = "needs" if "needs" in out else "scores"
        print(f"{label}: " + "  ".join(f"{m} {v:.3f}" for m, v in scores.items()))
    if "predicted_success" in out:
        print("predicted success: " + "  ".join(f"{m} {v:.3f}" for m, v in out["predicted_success"].items()))
        print(f"cost ({out['unit']}): " + "  ".join(f"{m} {v:g}" for m, v in out["cost"].items()))
    return 0
