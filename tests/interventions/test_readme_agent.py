"""The README's agent spec (tools: [builtin], interventions: [rein]) on the default embedded model:
20 ordinary requests get correct answers and no recovery call (ReIn must never hurt)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from agent.runtime import Agent

README = Path(__file__).resolve().parents[2] / "README.md"
RECOVERY = {"report_internal_error", "transfer_to_human_agents"}

# (request, a pattern the answer must match, or None where any plain answer will do)
ORDINARY = [
    ("What is 17*23?", r"391"),
    ("What is 6 times 7?", r"\b42\b"),
    ("Calculate 1234 + 4321.", r"5,?555"),
    ("What's 15% of 80?", r"\b12\b"),
    ("Divide 144 by 12.", r"\b12\b"),
    ("What is the capital of France?", r"Paris"),
    ("How many days are in a week?", r"\b(7|seven)\b"),
    ("Which planet is known as the Red Planet?", r"Mars"),
    ("Who wrote Romeo and Juliet?", r"Shakespeare"),
    ("Translate 'good morning' into French.", r"[Bb]onjour"),
    ("What is the opposite of 'hot'?", r"[Cc]old"),
    ("Spell the word 'cat' backwards.", r"tac"),
    ("Write a haiku about autumn.", None),
    ("What time is it?", None),
    ("What's the weather in Paris?", None),
    ("Give me a synonym for 'happy'.", None),
    ("Tell me a fun fact about octopuses.", None),
    ("Hi, how are you?", None),
    ("Thanks for your help!", None),
    ("Can you suggest a name for a goldfish?", None),
]


def readme_spec() -> dict:
    """The YAML agent spec in the README's tour."""
    blocks = re.findall(r"```yaml\n(.*?)```", README.read_text(encoding="utf-8"), re.S)
    spec = next(yaml.safe_load(b) for b in blocks if "interventions:" in b and "name: helper" in b)
    assert spec["interventions"] == ["rein"] and spec["tools"] == ["builtin"]
    return spec | {"checkpointer": "memory"}


def test_readme_spec_declares_the_recovery_tools_through_rein() -> None:
    spec = readme_spec() | {"model": "echo"}
    agent = Agent.from_spec(spec)
    tools = agent.tools.as_dict()
    assert set(tools) >= RECOVERY and all(tools[n].metadata.get("plan_only") for n in RECOVERY)


@pytest.mark.slow
def test_readme_agent_answers_ordinary_requests_with_no_recovery_call() -> None:
    agent = Agent.from_spec(readme_spec())
    failures = []
    for k, (request, expected) in enumerate(ORDINARY):
        result = agent.invoke(request, thread_id=f"ordinary-{k}")
        called = [tc.name for m in result.messages for tc in m.tool_calls]
        planted = [r.get("error_type") for r in result.interventions if r.get("activated")]
        if RECOVERY & set(called) or planted or result.termination != "agent_stop" or not result.output.strip():
            failures.append((request, called, planted, result.termination, result.output[:120]))
        elif expected is not None and not re.search(expected, result.output):
            failures.append((request, called, planted, "wrong answer", result.output[:120]))
    assert not failures, failures
