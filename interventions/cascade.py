"""The cascade: the offline module proposes, the LLM module confirms, before a plan is planted.

The offline detector costs milliseconds and runs on every turn; the LLM module costs a model call
and runs only on the turns the offline one flags. A plan is planted only when both find an error,
with the LLM's error type (it read the whole card and dialogue).
"""

from __future__ import annotations

from agent.plugin_api import InterventionContext
from interventions.detection import Detection, Detector
from interventions.error_map import NO_ERROR


class CascadeDetector:
    """A cheap proposer and a careful confirmer; an error needs both."""

    name = "cascade"

    def __init__(self, proposer: Detector, confirmer: Detector) -> None:
        """proposer: runs on every turn (the offline detector); confirmer: runs where it flags (the LLM)."""
        self.proposer = proposer
        self.confirmer = confirmer

    async def detect(self, ctx: InterventionContext, labels: list[str]) -> Detection:
        proposed = await self.proposer.detect(ctx, labels)
        if not proposed.is_error:
            return Detection(NO_ERROR, proposed.confidence, detector=self.name, scores=proposed.scores)
        confirmed = await self.confirmer.detect(ctx, labels)
        rationale = confirmed.rationale or ""
        if not confirmed.is_error:
            note = f"{self.proposer.name} proposed {proposed.error_type}; {self.confirmer.name} found none"
            return Detection(NO_ERROR, confirmed.confidence, rationale=f"{note}. {rationale}".strip(), detector=self.name,
                             scores=proposed.scores)
        return Detection(confirmed.error_type, proposed.confidence, rationale=rationale, detector=self.name,
                         scores=proposed.scores)
