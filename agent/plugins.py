"""Plug-ins found by name: interventions and mode policies.

Names map to "module:attribute" factories, imported only when a name is used, so the runtime core
never imports the packages that plug into it.
"""

from __future__ import annotations

from typing import Any

from agent.errors import UserFacingError
from agent.hooks import MODES, FixedMode, Intervention, ModePolicy
from tools.registry import resolve

INTERVENTIONS: dict[str, str] = {
    "none": "",
    "rein": "interventions.rein:ReInIntervention",
    "npi": "interventions.baselines:NaivePromptInjection",
    "self-refine": "interventions.baselines:SelfRefine",
    "retrieve": "graphs.node:RetrievalNode",
}

MODE_POLICIES: dict[str, str] = {
    "self": "agent.routing:SelfRouter",
    "offline": "agent.routing:OfflineRouter",
    "cost": "agent.routing:CostAwareRouter",
}


def register_intervention(name: str, factory: str) -> None:
    """Make an intervention available by name ("module:attribute" of a class or factory)."""
    INTERVENTIONS[name] = factory


def register_mode_policy(name: str, factory: str) -> None:
    """Make a mode policy available by name."""
    MODE_POLICIES[name] = factory


def load_intervention(name: str, **options: Any) -> Intervention | None:
    """Build the intervention registered under name; "none" gives None."""
    if name not in INTERVENTIONS:
        raise UserFacingError(f"unknown intervention {name!r}; known: {', '.join(INTERVENTIONS)}")
    path = INTERVENTIONS[name]
    return resolve(path)(**options) if path else None


def load_mode_policy(name: str, **options: Any) -> ModePolicy:
    """A fixed mode (instant, reasoning, agentic) or a registered policy (self, offline, cost)."""
    if name in MODES:
        return FixedMode(name)  # type: ignore[arg-type]
    if name not in MODE_POLICIES:
        known = ", ".join([*MODES, *MODE_POLICIES])
        raise UserFacingError(f"unknown mode policy {name!r}; known: {known}")
    return resolve(MODE_POLICIES[name])(**options)  # type: ignore[no-any-return]
