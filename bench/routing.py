"""Accuracy and cost-of-pass of always-instant, always-reasoning, always-agentic and routed.

    python bench/routing.py                          # embedded model, 5 queries of each kind
    python bench/routing.py --per-kind 2 --self      # smaller, and add the self-router
    python bench/routing.py --model echo --per-kind 1  # smoke run, no model weights

The mixed set: the first N trivia (instant) and the first N GSM8K problems (reasoning) of
shared/data/routing/routing_dev.jsonl, in file order, plus N questions about a small order table
that only the get_order tool can answer (agentic; written for this bench). Every query runs in
every mode through the mode paths of agent.modes (the functions the agent graph calls), with
greedy decoding. A routed strategy answers each query with the run of the mode its router chose:
decoding is deterministic, so rerunning that mode would repeat the same run. Router spend (the
self-router's classification call) is added; the offline router's embedding is CPU time, not tokens.

Cost-of-pass = total tokens (or dollars) / correct answers; the embedded model is free, so tokens.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import string
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from agent.cost_of_pass import CostOfPass, cost_of_pass, reduction  # noqa: E402
from agent.ledger import CostLedger, PriceTable  # noqa: E402
from agent.messages import Message, ModelSettings  # noqa: E402
from agent.models import Model, resolve_model  # noqa: E402
from agent.modes import A2FM_MODES, StepLimits, loops_back, mode_step, step_message  # noqa: E402
from agent.plugin_api import MODES, Mode  # noqa: E402
from tools import CallRequest, Tool, ToolKind, execute_calls, tool  # noqa: E402
from tools.builtin import calculate  # noqa: E402

SHARED = (ROOT / ".." / "shared" / "data" / "routing").resolve()
SYSTEM = "You are a helpful assistant. Answer the user's question."

ORDERS: dict[str, dict[str, Any]] = {
    "W1001": {"status": "delivered", "total": 42.5, "ship_to": "Denver", "items": ["desk lamp"]},
    "W1002": {"status": "pending", "total": 89.99, "ship_to": "Austin", "items": ["headphones", "charger"]},
    "W1003": {"status": "shipped", "total": 15.0, "ship_to": "Boston", "items": ["notebook"]},
    "W1004": {"status": "cancelled", "total": 120.0, "ship_to": "Seattle", "items": ["office chair"]},
}

TOOL_QUERIES: list[dict[str, Any]] = [
    {"query": "What is the status of order #W1002?", "answer": "pending"},
    {"query": "Which city is order #W1003 being shipped to?", "answer": "Boston"},
    {"query": "What was the total of order #W1001, in dollars?", "answer": "42.5"},
    {"query": "What is the combined total, in dollars, of orders #W1001 and #W1003?", "answer": "57.5"},
    {"query": "What item was in order #W1004?", "answer": "office chair"},
]


@tool(kind=ToolKind.READ)
def get_order(order_id: str) -> str:
    """Look up an order by its id.

    Args:
        order_id: The order id, such as '#W1001'.
    """
    key = order_id.strip().lstrip("#").upper()
    if key not in ORDERS:
        return f"No order {order_id!r}. Known ids look like #W1001."
    return json.dumps({"order_id": f"#{key}", **ORDERS[key]})


def mixed_set(per_kind: int) -> list[dict[str, Any]]:
    """N trivia, N GSM8K and N order questions, with gold answers and gold modes."""
    dev = SHARED / "routing_dev.jsonl"
    if not dev.is_file():
        raise SystemExit(f"{dev} not found: the bench needs shared/data/routing next to the repo")
    rows = [json.loads(line) for line in dev.read_text().splitlines() if line.strip()]
    trivia = [r for r in rows if r["source"] == "opentriviaqa"][:per_kind]
    gsm8k = [r for r in rows if r["source"] == "gsm8k-test"][:per_kind]
    orders = [{**q, "mode": "agentic", "source": "bench-orders", "id": f"orders-{i + 1}"}
              for i, q in enumerate(TOOL_QUERIES[:per_kind])]
    return [{k: r[k] for k in ("id", "query", "mode", "source", "answer")} for r in (*trivia, *gsm8k, *orders)]


_ARTICLES = re.compile(r"\b(a|an|the)\b")
_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?")
_STOP = {"a", "an", "the", "of", "to", "is", "who", "and", "in", "on", "for"}


def _norm(text: str) -> str:
    text = text.lower().translate(str.maketrans("", "", string.punctuation.replace(".", "")))
    return " ".join(_ARTICLES.sub(" ", text).split())


def _numbers(text: str) -> list[float]:
    out = []
    for raw in _NUMBER.findall(text):
        try:
            out.append(float(raw.replace(",", "").rstrip(".")))
        except ValueError:
            continue
    return out


def is_correct(answer: str, gold: str) -> bool:
    """Numeric gold: the answer's last number equals it. Text gold: it appears in the answer, or
    at least three quarters of its content words do."""
    try:
        target = float(gold.replace(",", ""))
    except ValueError:
        target = None
    if target is not None:
        numbers = _numbers(answer)
        return bool(numbers) and abs(numbers[-1] - target) < 1e-6
    a, g = _norm(answer), _norm(gold)
    if g and g in a:
        return True
    words = [w for w in g.split() if w not in _STOP]
    return bool(words) and sum(w in a.split() for w in words) / len(words) >= 0.75


async def drive(model: Model, tools: dict[str, Tool], mode: Mode, query: str, settings: ModelSettings,
                limits: StepLimits, prices: PriceTable) -> dict[str, Any]:
    """One turn in one mode, as the agent graph runs it: model steps, tool rounds, a ledger."""
    messages = [Message.user(query)]
    ledger = CostLedger()
    schemas = [t.openai_schema() for t in tools.values()]
    cap = limits.for_mode(mode)
    steps = 0
    tool_calls = 0
    termination = "max_steps"
    started = time.perf_counter()
    while steps < cap:
        step = mode_step(mode, messages, schemas, settings, system=SYSTEM, step=steps, limit=cap)
        try:
            response = await model.complete(step.request)
        except Exception as exc:  # a failed call ends the turn, as in the graph
            termination = f"model_error: {exc}"
            break
        steps += 1
        ledger.book_model(response.model or model.name, response.usage, prices)
        message = step_message(step, response)
        messages.append(message)
        if message.tool_calls:
            tool_calls += len(message.tool_calls)
            calls = [CallRequest(c.id, c.name, c.arguments) for c in message.tool_calls]
            for r in await execute_calls(calls, tools):
                ledger.book_tool(r.name, r.cost)
                messages.append(Message.tool(r.call_id, r.name, r.content, r.is_error))
            continue
        if not loops_back(message):
            termination = "agent_stop"
            break
    answer = next((m.text for m in reversed(messages) if m.role == "assistant" and m.text), "")
    return {"answer": answer, "ledger": ledger, "steps": steps, "tool_calls": tool_calls,
            "termination": termination, "seconds": round(time.perf_counter() - started, 2)}


async def drive_runtime(model: Model, tools: dict[str, Tool], mode: Mode, query: str, settings: ModelSettings,
                        limits: StepLimits, prices: PriceTable) -> dict[str, Any]:
    """The same turn through agent.runtime.Agent (the LangGraph graph)."""
    from agent.runtime import Agent

    agent = Agent(model, list(tools.values()), SYSTEM, step_limits=limits, settings=settings,
                  checkpointer="memory", prices=prices)
    agent.deps.mode_config = A2FM_MODES  # the runtime's default agentic path is a bare tool loop
    started = time.perf_counter()
    try:
        result = await agent.ainvoke(query, mode=mode)
    finally:
        await agent.aclose()
    return {"answer": result.output, "ledger": result.ledger, "steps": result.ledger.usage.requests,
            "tool_calls": sum(len(m.tool_calls) for m in result.messages), "termination": result.termination,
            "seconds": round(time.perf_counter() - started, 2)}


def summarize(name: str, cop: CostOfPass, base: dict[str, CostOfPass]) -> dict[str, Any]:
    row = {"strategy": name, **cop.as_dict()}
    for mode in ("reasoning", "agentic"):
        cut = reduction(cop, base[mode])
        row[f"cut_vs_{mode}"] = None if cut is None else round(cut, 3)
    return row


def table(rows: list[dict[str, Any]]) -> str:
    head = ("| strategy | accuracy | correct | tokens | tokens/pass | $/pass | cost-of-pass cut vs reasoning "
            "| vs agentic |\n|---|---|---|---|---|---|---|---|")
    lines = [head]
    for r in rows:
        def pct(v: float | None) -> str:
            return "n/a" if v is None else f"{100 * v:+.1f}%"
        tpp = "inf" if r["tokens_per_pass"] is None else f"{r['tokens_per_pass']:.0f}"
        dpp = "inf" if r["dollars_per_pass"] is None else f"{r['dollars_per_pass']:.6f}"
        lines.append(f"| {r['strategy']} | {r['accuracy']:.2f} | {r['correct']}/{r['attempts']} | {r['tokens']} "
                     f"| {tpp} | {dpp} | {pct(r['cut_vs_reasoning'])} | {pct(r['cut_vs_agentic'])} |")
    return "\n".join(lines)


async def run(args: argparse.Namespace) -> dict[str, Any]:
    from agent.routing import CostAwareRouter, OfflineRouter, SelfRouter

    items = mixed_set(args.per_kind)
    options: dict[str, Any] = {"n_threads": args.threads} if args.model.startswith("local:") and args.threads else {}
    model = resolve_model(args.model, **options)
    settings = ModelSettings(temperature=0.0, max_tokens=args.max_tokens, seed=0)
    limits = StepLimits(agentic=args.agentic_steps)
    prices = PriceTable()
    tools = {"get_order": get_order, "calculate": calculate}
    runner = drive_runtime if args.runtime else drive
    runs: dict[str, list[dict[str, Any]]] = {m: [] for m in MODES}
    for item in items:
        for mode in MODES:
            out = await runner(model, tools, mode, item["query"], settings, limits, prices)
            out["correct"] = is_correct(out["answer"], str(item["answer"]))
            runs[mode].append(out)
            print(f"[{item['id']:>9}] {mode:<9} {'ok ' if out['correct'] else 'no '} "
                  f"{out['ledger'].usage.total_tokens:>5} tok {out['seconds']:>6.1f}s  {out['answer'][:70]!r}",
                  file=sys.stderr, flush=True)

    offline = OfflineRouter()
    proba = offline.predict_proba([i["query"] for i in items])
    needs: list[dict[str, float]] = [{m: float(p) for m, p in zip(MODES, row, strict=True)} for row in proba]
    choices: dict[str, list[Mode]] = {"routed (offline)": [max(MODES, key=lambda m: n[m]) for n in needs]}
    cost_router = CostAwareRouter(threshold=args.threshold, router=offline)
    choices[f"routed (cost, threshold {args.threshold})"] = [cost_router.choose(n).mode for n in needs]
    router_ledgers: dict[str, list[CostLedger]] = {k: [CostLedger() for _ in items] for k in choices}
    if args.self_route:
        self_router = SelfRouter(model=model, prices=prices)
        picks: list[Mode] = []
        ledgers: list[CostLedger] = []
        for item in items:
            decision, response = await self_router.classify(item["query"], tool_names=list(tools))
            ledger = CostLedger()
            if response is not None:
                ledger.book_model(response.model or model.name, response.usage, prices, label="router")
            picks.append(decision.mode)
            ledgers.append(ledger)
        choices["routed (self)"] = picks
        router_ledgers["routed (self)"] = ledgers

    base: dict[str, CostOfPass] = {m: cost_of_pass([r["ledger"] for r in runs[m]], [r["correct"] for r in runs[m]]) for m in MODES}
    rows = [summarize(f"always {m}", base[m], base) for m in MODES]
    per_query = []
    for name, picks in choices.items():
        ledgers = []
        for i, mode in enumerate(picks):
            combined = CostLedger(entries=[*runs[mode][i]["ledger"].entries, *router_ledgers[name][i].entries])
            ledgers.append(combined)
        cop = cost_of_pass(ledgers, [runs[m][i]["correct"] for i, m in enumerate(picks)])
        rows.append(summarize(name, cop, base))
    oracle: list[Mode] = []
    for i in range(len(items)):
        solving = [m for m in MODES if runs[m][i]["correct"]]
        oracle.append(min(solving, key=lambda m: runs[m][i]["ledger"].usage.total_tokens) if solving else "instant")
    cop = cost_of_pass([runs[m][i]["ledger"] for i, m in enumerate(oracle)],
                       [runs[m][i]["correct"] for i, m in enumerate(oracle)])
    rows.append(summarize("oracle (cheapest correct mode)", cop, base))
    for i, item in enumerate(items):
        per_query.append({
            **item,
            "routes": {name: picks[i] for name, picks in choices.items()},
            "runs": {m: {k: (v.summary() if k == "ledger" else v) for k, v in runs[m][i].items()} for m in MODES},
        })
    return {
        "model": model.name, "queries": len(items), "per_kind": args.per_kind, "max_tokens": args.max_tokens,
        "agentic_steps": args.agentic_steps, "path": "runtime" if args.runtime else "mode functions",
        "table": rows, "per_query": per_query,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="local:qwen2.5-coder-0.5b", help="model name (default: the embedded model)")
    parser.add_argument("--per-kind", type=int, default=5, help="queries of each kind (trivia, GSM8K, orders)")
    parser.add_argument("--max-tokens", type=int, default=256, help="cap on each model call's output")
    parser.add_argument("--agentic-steps", type=int, default=6, help="agentic step cap")
    parser.add_argument("--threshold", type=float, default=0.8, help="cost-aware router threshold")
    parser.add_argument("--self", dest="self_route", action="store_true", help="also route with the model's own tag")
    parser.add_argument("--runtime", action="store_true", help="run turns through agent.runtime.Agent")
    parser.add_argument("--threads", type=int, default=None, help="llama.cpp threads for the local model")
    parser.add_argument("--out", type=Path, default=None, help="write the full results as JSON here")
    args = parser.parse_args(argv)
    if not 1 <= args.per_kind <= len(TOOL_QUERIES):
        parser.error(f"--per-kind must be between 1 and {len(TOOL_QUERIES)}")
    started = time.perf_counter()
    result = asyncio.run(run(args))
    result["seconds"] = round(time.perf_counter() - started, 1)
    print(f"model {result['model']}, {result['queries']} queries, max_tokens {args.max_tokens}, "
          f"{result['seconds']} s, path: {result['path']}")
    print(table(result["table"]))
    if args.out:
        args.out.write_text(json.dumps(result, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
