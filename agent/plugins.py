"""Plug-ins found by name: interventions, guardrails and mode policies.

A name is looked up among those registered in this process, then in the "rein.interventions",
"rein.guardrails" and "rein.mode_policies" entry points of the installed distributions (tools/entry_points.py), so the
runtime core never names, nor imports, the packages that plug into it.
"""

from __future__ import annotations

from typing import Any

from agent.errors import UserFacingError
from agent.guardrails import Guardrail
from agent.plugin_api import MODES, FixedMode, Intervention, ModePolicy
from tools import entry_points
from tools.registry import resolve

NO_INTERVENTION = "none"

# Registered in this process (register_*): "module:attribute" paths that shadow entry points.
_INTERVENTIONS: dict[str, str] = {}
_MODE_POLICIES: dict[str, str] = {}
_GUARDRAILS: dict[str, str] = {}


def register_intervention(name: str, factory: str) -> None:
    """Make an intervention available by name in this process ("module:attribute" of a class or
    factory); a distribution declares one for everyone as a "rein.interventions" entry point."""
    _INTERVENTIONS[name] = factory


def register_guardrail(name: str, factory: str) -> None:
    """Make a guardrail available by name in this process ("module:attribute" of a class or factory)."""
    _GUARDRAILS[name] = factory


def register_mode_policy(name: str, factory: str) -> None:
    """Make a mode policy available by name in this process."""
    _MODE_POLICIES[name] = factory


def intervention_names() -> list[str]:
    """"none" and every registered or declared intervention."""
    return [NO_INTERVENTION, *sorted({*_INTERVENTIONS, *entry_points.names(entry_points.INTERVENTIONS)})]


def guardrail_names() -> list[str]:
    """Every registered or declared guardrail."""
    return sorted({*_GUARDRAILS, *entry_points.names(entry_points.GUARDRAILS)})


def mode_policy_names() -> list[str]:
    """The fixed modes and every registered or declared mode policy."""
    policies = sorted({*_MODE_POLICIES, *entry_points.names(entry_points.MODE_POLICIES)})
    return [*MODES, *policies]


def load_intervention(name: str, **options: Any) -> Intervention | None:
    """Build the intervention registered or declared under name; "none" gives None."""
    if name == NO_INTERVENTION:
        return None
    factory = _factory(name, _INTERVENTIONS, entry_points.INTERVENTIONS, "intervention", intervention_names)
    return factory(**options)


def load_guardrail(name: str, **options: Any) -> Guardrail:
    """Build the guardrail registered or declared under name (e.g. "injection")."""
    factory = _factory(name, _GUARDRAILS, entry_points.GUARDRAILS, "guardrail", guardrail_names)
    return factory(**options)


def load_mode_policy(name: str, **options: Any) -> ModePolicy:
    """A fixed mode (instant, reasoning, agentic) or a registered or declared policy (self, …)."""
    if name in MODES:
        return FixedMode(name)
    factory = _factory(name, _MODE_POLICIES, entry_points.MODE_POLICIES, "mode policy", mode_policy_names)
    return factory(**options)


def _factory(name: str, registered: dict[str, str], group: str, kind: str, known: Any) -> Any:
    if name in registered:
        return resolve(registered[name])
    try:
        plugin = entry_points.find(group, name)
    except entry_points.PluginConflict as exc:
        raise UserFacingError(str(exc)) from None
    if plugin is None:
        hint = entry_points.missing_hint(group)
        raise UserFacingError(f"unknown {kind} {name!r}; known: {', '.join(known())}{hint}")
    return plugin.load()
