"""Reasoning interventions: ReIn (reasoning inception) for conversational error recovery, and baselines;
and the `injection` guardrail, which answers instructions injected in tool results the same way.

    from interventions import ReInIntervention, with_recovery_tools
    agent = Agent(model, with_recovery_tools(tools), system_prompt, interventions=[ReInIntervention()])

The protocol types come from the runtime (agent.plugin_api). Implementations load on first use, so
importing this package stays light (no torch, no embeddings).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agent.lazy import lazy_exports
from agent.plugin_api import Intervention, InterventionContext, Plant, PlantVia, ResponseReviewer

if TYPE_CHECKING:
    from interventions.baselines import NaivePromptInjection, SelfRefine
    from interventions.detection import Detection, Detector
    from interventions.error_map import ErrorMap, ErrorType, load_error_map
    from interventions.injection import InjectionDetector, InjectionGuardrail
    from interventions.llm_inception import LLMDetector
    from interventions.offline import OfflineDetector
    from interventions.recovery_tools import with_recovery_tools
    from interventions.rein import ReInIntervention

_LAZY = {
    "ReInIntervention": "interventions.rein",
    "NaivePromptInjection": "interventions.baselines",
    "SelfRefine": "interventions.baselines",
    "Detection": "interventions.detection",
    "Detector": "interventions.detection",
    "ErrorMap": "interventions.error_map",
    "ErrorType": "interventions.error_map",
    "load_error_map": "interventions.error_map",
    "InjectionDetector": "interventions.injection",
    "InjectionGuardrail": "interventions.injection",
    "LLMDetector": "interventions.llm_inception",
    "OfflineDetector": "interventions.offline",
    "with_recovery_tools": "interventions.recovery_tools",
}


__getattr__ = lazy_exports(__name__, _LAZY)


__all__ = [
    "Detection",
    "Detector",
    "ErrorMap",
    "ErrorType",
    "InjectionDetector",
    "InjectionGuardrail",
    "Intervention",
    "InterventionContext",
    "LLMDetector",
    "NaivePromptInjection",
    "OfflineDetector",
    "Plant",
    "PlantVia",
    "ReInIntervention",
    "ResponseReviewer",
    "SelfRefine",
    "load_error_map",
    "with_recovery_tools",
]
