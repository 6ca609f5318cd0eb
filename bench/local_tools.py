"""Does an embedded model choose the tool it should? Per tool protocol: the action taken, latency, speed.

Each case is one model call on a fresh request: a system prompt, one user message, the tools
offered with tool choice auto, greedy decoding. Simple cases offer `calculate` and `get_weather`;
retail cases are the opening user turns of the first scenarios of the recovery suite, with the
retail policy as the system prompt and the scenario's own tools (retail, builtin, recovery), where
the expected action is `report_internal_error`, plus one clear retail request. Run by hand:

    python bench/local_tools.py                                   # 0.5B, both protocols, all cases
    python bench/local_tools.py --models qwen2.5-coder-1.5b --retail 2 --protocols action

A case passes when the first action is the expected one ("respond": an answer, no tool call).
Prompt tokens are counted, but a case after another with the same system prompt reuses llama.cpp's
cached prefix, so its latency is mostly the generation; tokens/s is output tokens over the latency.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agent.messages import Message, ModelRequest, ModelSettings  # noqa: E402
from agent.models.local import LocalModel  # noqa: E402
from tools.builtin import calculate  # noqa: E402
from tools.tool import tool  # noqa: E402


@tool
def get_weather(city: str) -> str:
    """Get the current weather for a city.

    Args:
        city: Name of the city.
    """
    return f"Sunny in {city}"


@dataclass
class Case:
    """One request and the action it should lead to."""

    name: str
    """Short label."""
    system: str
    """System prompt."""
    user: str
    """The user's message."""
    tools: list[dict[str, Any]]
    """Offered tools (OpenAI schemas)."""
    expected: str
    """The tool that should be called first, or "respond"."""


def simple_cases() -> list[Case]:
    """Arithmetic, weather and small talk with two tools."""
    tools = [calculate.openai_schema(), get_weather.openai_schema()]
    system = "You are a helpful assistant."
    return [
        Case("calc 19*3", system, "What is 19*3?", tools, "calculate"),
        Case("calc 1234*5678", system, "Compute 1234 * 5678.", tools, "calculate"),
        Case("weather", system, "What's the weather in Paris?", tools, "get_weather"),
        Case("greeting", system, "Hi! How are you?", tools, "respond"),
    ]


def retail_cases(limit: int) -> list[Case]:
    """The opening turns of the first recovery scenarios, and one clear request."""
    from scenarios.loading import load_scenarios
    from scenarios.orchestrator import build_environment
    from scenarios.recovery.build import SUITE_PATH

    cases: list[Case] = []
    scenarios = [s for s in load_scenarios(SUITE_PATH) if s.domain == "retail" and s.errors]
    tools: list[dict[str, Any]] = []
    policy = ""
    for scenario in scenarios[:limit]:
        _env, toolkit, policy = build_environment(scenario)
        tools = [t.openai_schema() for t in toolkit]
        kind = scenario.errors[0].type
        cases.append(Case(f"retail {kind}", policy, scenario.errors[0].text or "", tools, "report_internal_error"))
    if tools:
        user = "Hi, I'm Mei Kovacs, zip code 28236. What is the status of my most recent order?"
        cases.append(Case("retail lookup", policy, user, tools, "find_user_id_by_name_zip"))
    return cases


async def run(model: LocalModel, cases: list[Case], max_tokens: int) -> list[dict[str, Any]]:
    rows = []
    for case in cases:
        request = ModelRequest(
            messages=[Message.system(case.system), Message.user(case.user)],
            tools=case.tools,
            settings=ModelSettings(max_tokens=max_tokens, tool_choice="auto"),
        )
        started = time.perf_counter()
        response = await model.complete(request)
        seconds = time.perf_counter() - started
        action = response.tool_calls[0].name if response.tool_calls else "respond"
        said = response.tool_calls[0].arguments if response.tool_calls else response.text
        rows.append(
            {
                "model": model.name,
                "protocol": model.tool_protocol,
                "case": case.name,
                "expected": case.expected,
                "action": action,
                "ok": action == case.expected,
                "detail": said[:70],
                "prompt_tokens": response.usage.input_tokens,
                "output_tokens": response.usage.output_tokens,
                "seconds": round(seconds, 2),
                "tokens_per_s": round(response.usage.output_tokens / seconds, 1) if seconds else None,
            }
        )
        print(json.dumps(rows[-1]), flush=True)
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", default="qwen2.5-coder-0.5b", help="comma-separated local model names")
    parser.add_argument("--protocols", default="json,action", help="comma-separated: json, action")
    parser.add_argument("--retail", type=int, default=4, help="retail recovery scenarios to include (0: none)")
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args()
    cases = simple_cases() + (retail_cases(args.retail) if args.retail else [])
    summary = []
    for name in args.models.split(","):
        for protocol in args.protocols.split(","):
            model = LocalModel(name, n_threads=args.threads, tool_protocol=protocol)
            rows = asyncio.run(run(model, cases, args.max_tokens))
            ok = sum(r["ok"] for r in rows)
            summary.append(f"{model.name:<26} {protocol:<7} {ok}/{len(rows)} expected actions")
    print("\n".join(summary))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
