"""ReIn (Reasoning Inception): plant a diagnosis and recovery plan as the agent's own reasoning.

At the start of each user turn an inception module (offline classifier or LLM) maps the dialogue
to "no error" or an error type; the error map turns the type into a recovery plan, which enters
the context as a synthetic think-tool call (or a reasoning block). The system prompt and the
model's weights are never touched. Models that rein prompts itself (the embedded ones) render
either form as the opening of the assistant's own turn, so the model acts straight on from its
plan (agent/models/local_prompt.py).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from agent.models.base import Model
from agent.plugin_api import InterventionContext, Plant, PlantVia
from interventions.detection import Detection, Detector, latest_user_turn
from interventions.error_map import ErrorMap, resolve_error_map
from interventions.recovery_tools import missing_recovery_tools

log = logging.getLogger(__name__)

DETECTORS = ("offline", "llm")


def build_detector(
    detector: str | Detector, error_map: ErrorMap, model: Model | str | None, threshold: float | None, detector_file: str | Path | None
) -> Detector:
    """A detector by name ("offline" or "llm") or the given instance."""
    if not isinstance(detector, str):
        return detector
    if detector == "offline":
        from interventions.offline import OfflineDetector

        return OfflineDetector(detector_file, threshold=threshold)
    if detector == "llm":
        from interventions.llm_inception import LLMDetector

        return LLMDetector(error_map, model)
    raise ValueError(f"unknown detector {detector!r}; use one of {', '.join(DETECTORS)} or a Detector instance")


class DiagnosingIntervention:
    """Shared by ReIn and the naive-prompt-injection baseline: detect, then plant the map's plan."""

    name = "diagnose"
    via: PlantVia = "think_tool"

    def __init__(
        self,
        *,
        detector: str | Detector = "offline",
        model: Model | str | None = None,
        error_map: ErrorMap | str | Path | dict[str, Any] | None = None,
        threshold: float | None = None,
        detector_file: str | Path | None = None,
    ) -> None:
        self.error_map = resolve_error_map(error_map)
        self.detector = build_detector(detector, self.error_map, model, threshold, detector_file)
        self._warned_missing = False

    async def diagnose(self, ctx: InterventionContext) -> Detection:
        """The detector's verdict for this turn."""
        return await self.detector.detect(ctx, self.error_map.labels)

    async def before_turn(self, ctx: InterventionContext) -> Plant | None:
        user = latest_user_turn(ctx.dialogue)
        if not user.strip():
            return None
        found = await self.diagnose(ctx)
        if not found.is_error or found.error_type not in self.error_map.error_types:
            return None
        recovery = self.error_map.recovery(found.error_type, user_turn=user, rationale=found.rationale)
        declared = recovery.recovery_tool not in missing_recovery_tools(ctx.tools, self.error_map)
        if not declared and not self._warned_missing:
            # The paper found plans pointing at undeclared tools have no effect; say so once.
            log.warning(
                "%s: recovery tool %r is not declared to the agent; use interventions.with_recovery_tools()",
                self.name,
                recovery.recovery_tool,
            )
            self._warned_missing = True
        record = {
            "error_type": found.error_type,
            "category": recovery.category,
            "recovery_tool": recovery.recovery_tool,
            "recovery_tool_declared": declared,
            "confidence": found.confidence,
            "detector": found.detector or getattr(self.detector, "name", "custom"),
        }
        if found.rationale:
            record["rationale"] = found.rationale
        return Plant(text=recovery.plan, via=self.via, record=record)


class ReInIntervention(DiagnosingIntervention):
    """ReIn: the recovery plan as the agent's own reasoning (a think-tool call by default)."""

    name = "rein"

    def __init__(
        self,
        *,
        detector: str | Detector = "offline",
        model: Model | str | None = None,
        error_map: ErrorMap | str | Path | dict[str, Any] | None = None,
        via: PlantVia = "think_tool",
        threshold: float | None = None,
        detector_file: str | Path | None = None,
    ) -> None:
        """detector: "offline" (no LLM), "llm" (model, default the agent's) or a Detector; via: think_tool
        or reasoning_block; threshold: the offline detector's activation threshold (None: the one
        calibrated when it was trained)."""
        if via not in ("think_tool", "reasoning_block"):
            raise ValueError(
                f"ReIn plants reasoning as think_tool or reasoning_block, not {via!r} "
                "(the system-prompt variant is the 'npi' baseline)"
            )
        super().__init__(
            detector=detector, model=model, error_map=error_map, threshold=threshold, detector_file=detector_file
        )
        self.via = via
