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
from interventions.card import Scope, build_card
from interventions.detection import Detection, Detector, latest_user_turn
from interventions.error_map import ErrorMap, resolve_error_map
from interventions.recovery_tools import Offer, missing_recovery_tools, recovery_declarations
from tools import Tool

log = logging.getLogger(__name__)

DETECTORS = ("offline", "llm", "cascade")
DOMAIN_ERRORS = frozenset({"unsupported_domain"})
"""Error types that a general assistant cannot commit: any everyday task is within its purpose."""


def build_detector(
    detector: str | Detector, error_map: ErrorMap, model: Model | str | None, threshold: float | None, detector_file: str | Path | None
) -> Detector:
    """A detector by name ("offline", "llm", or "cascade": offline proposes, LLM confirms) or the given instance."""
    if not isinstance(detector, str):
        return detector
    if detector in ("offline", "cascade"):
        from interventions.offline import OfflineDetector

        offline = OfflineDetector(detector_file, threshold=threshold)
        if detector == "offline":
            return offline
    if detector in ("llm", "cascade"):
        from interventions.llm_inception import LLMDetector

        llm = LLMDetector(error_map, model)
        if detector == "llm":
            return llm
        from interventions.cascade import CascadeDetector

        return CascadeDetector(offline, llm)
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
        offer: Offer = "on_plan",
        scope: Scope | None = None,
        calibration_file: str | Path | None = None,
    ) -> None:
        self.calibration = None
        if calibration_file is not None:
            from interventions.calibration import Calibration

            self.calibration = Calibration.load(calibration_file)
            threshold = self.calibration.threshold if threshold is None else threshold
        if offer not in ("on_plan", "always"):
            raise ValueError(f"offer must be 'on_plan' or 'always', not {offer!r}")
        if scope not in (None, "general", "narrow"):
            raise ValueError(f"scope must be 'general', 'narrow' or None (inferred), not {scope!r}")
        self.error_map = resolve_error_map(error_map)
        self.detector = build_detector(detector, self.error_map, model, threshold, detector_file)
        self.offer: Offer = offer
        self.scope: Scope | None = scope
        self._warned_missing = False
        self._warned_card = False

    def declared_tools(self) -> list[Tool]:
        """The recovery tools and the think tool that carries the plan; with offer="on_plan" they are
        offered to the model only in turns where a plan was planted."""
        return recovery_declarations(self.error_map, self.offer)

    async def diagnose(self, ctx: InterventionContext) -> Detection:
        """The detector's verdict for this turn."""
        return await self.detector.detect(ctx, self.error_map.labels)

    async def before_turn(self, ctx: InterventionContext) -> Plant | None:
        user = latest_user_turn(ctx.dialogue)
        if not user.strip():
            return None
        if ctx.planted.get(ctx.turn - 1) == self.name:
            # This turn answers the question the last plan had the agent ask ("which order?"): a
            # clarification, to be acted on, not diagnosed again (clarify-then-act).
            return None
        card = build_card(ctx.tools, ctx.system_prompt, self.scope)
        if self.calibration is not None and self.calibration.card != card.key and not self._warned_card:
            log.warning("%s: the agent's tools or system prompt changed since it was calibrated; "
                        "run `rein calibrate` again", self.name)
            self._warned_card = True
        found = await self.diagnose(ctx)
        if not found.is_error or found.error_type not in self.error_map.error_types:
            return None
        if found.error_type in DOMAIN_ERRORS and card.scope == "general":
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
        offer: Offer = "on_plan",
        scope: Scope | None = None,
        calibration_file: str | Path | None = None,
    ) -> None:
        """detector: "offline" (no LLM), "llm" (model, default the agent's), "cascade" (offline
        proposes, LLM confirms) or a Detector; via: think_tool or reasoning_block; threshold: the
        offline detector's activation threshold (None: the one chosen on validation, or a
        calibration's); offer: "on_plan" declares the recovery tools only in turns with a plan,
        "always" in every turn; scope: "general" or "narrow" overrides what the system prompt says
        (a general assistant is never told a request is outside its domain); calibration_file: a
        file written by `rein calibrate`, whose threshold is used unless threshold is given."""
        if via not in ("think_tool", "reasoning_block"):
            raise ValueError(
                f"ReIn plants reasoning as think_tool or reasoning_block, not {via!r} "
                "(the system-prompt variant is the 'npi' baseline)"
            )
        super().__init__(
            detector=detector, model=model, error_map=error_map, threshold=threshold, detector_file=detector_file,
            offer=offer, scope=scope, calibration_file=calibration_file,
        )
        self.via = via
