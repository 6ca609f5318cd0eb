"""The cascade: the offline module proposes, the LLM module confirms before a plan is planted
(scripted models for the agent and the confirming LLM; a fixed proposer)."""

from __future__ import annotations

import json

from agent.models import ScriptedModel, reply
from agent.plugin_api import InterventionContext
from agent.runtime import Agent
from interventions import ReInIntervention
from interventions.cascade import CascadeDetector
from interventions.detection import Detection
from interventions.error_map import load_error_map
from interventions.llm_inception import LLMDetector


class Fixed:
    """A proposer that always says the same."""

    name = "fixed"

    def __init__(self, error_type: str) -> None:
        self.error_type = error_type
        self.calls = 0

    async def detect(self, ctx: InterventionContext, labels: list[str]) -> Detection:
        self.calls += 1
        return Detection(self.error_type, 0.97, detector=self.name)


def verdict(error_type: str) -> str:
    return json.dumps({"error_type": error_type, "rationale": "because"})


def agent_with(proposer: Fixed, confirmer: ScriptedModel, model: ScriptedModel) -> Agent:
    cascade = CascadeDetector(proposer, LLMDetector(load_error_map(), confirmer))
    return Agent(model, [], "You are the assistant of Acme Pharmacy.", interventions=[ReInIntervention(detector=cascade)],
                 checkpointer="memory")


async def test_the_llm_is_asked_only_where_the_proposer_flags() -> None:
    confirmer = ScriptedModel([])
    agent = agent_with(Fixed("none"), confirmer, ScriptedModel([reply("Sure.")]))
    result = await agent.ainvoke("Refill RX-1 please.")
    assert not result.interventions[0]["activated"] and confirmer.requests == []


async def test_a_proposal_the_llm_declines_plants_nothing() -> None:
    proposer = Fixed("unsupported_domain")
    agent = agent_with(proposer, ScriptedModel([verdict("none")]), ScriptedModel([reply("Sure.")]))
    result = await agent.ainvoke("What are your opening hours?")
    assert proposer.calls == 1 and not result.interventions[0]["activated"]
    assert [e.label for e in result.ledger.entries if e.label == "inception"] == ["inception"]


async def test_a_confirmed_proposal_plants_the_llms_error_type() -> None:
    model = ScriptedModel([reply("Which prescription do you mean?")])
    agent = agent_with(Fixed("ambiguous_interpretation"), ScriptedModel([verdict("vague_reference")]), model)
    result = await agent.ainvoke("Refill it.")
    record = result.interventions[0]
    assert record["activated"] and record["error_type"] == "vague_reference" and record["detector"] == "cascade"
    assert "report_internal_error" in record["text"]


def test_cascade_by_name_builds_offline_then_llm() -> None:
    rein = ReInIntervention(detector="cascade", model=ScriptedModel([]))
    assert isinstance(rein.detector, CascadeDetector)
    assert (rein.detector.proposer.name, rein.detector.confirmer.name) == ("offline", "llm")
