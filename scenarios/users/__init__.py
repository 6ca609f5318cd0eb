"""Simulated users: scripted, LLM-simulated (tau2 guidelines) and error-injecting (ReIn's six types).

Names are imported on first use (the scenario format imports the error-type table from here).
"""

from __future__ import annotations

from agent.lazy import lazy_exports

_EXPORTS = {
    "User": "scenarios.users.base",
    "UserView": "scenarios.users.base",
    "UserReply": "scenarios.users.base",
    "UserSimulationError": "scenarios.users.base",
    "STOP": "scenarios.users.base",
    "TRANSFER": "scenarios.users.base",
    "OUT_OF_SCOPE": "scenarios.users.base",
    "ScriptedUser": "scenarios.users.scripted",
    "SimulatedUser": "scenarios.users.simulated",
    "ErrorInjectingUser": "scenarios.users.injecting",
    "ErrorContext": "scenarios.users.error_templates",
    "build_context": "scenarios.users.error_templates",
    "ERROR_TYPES": "scenarios.users.error_types",
    "ErrorType": "scenarios.users.error_types",
}

__all__ = sorted(_EXPORTS)


__getattr__ = lazy_exports(__name__, _EXPORTS)
