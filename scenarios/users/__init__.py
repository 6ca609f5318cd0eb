"""Simulated users: scripted, LLM-simulated (tau2 guidelines) and error-injecting (ReIn's six types).

Names are imported on first use (the scenario format imports the error-type table from here).
"""

from __future__ import annotations

import importlib
from typing import Any

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
    "ErrorContext": "scenarios.users.error_turns",
    "build_context": "scenarios.users.error_turns",
    "ERROR_TYPES": "scenarios.users.error_types",
    "ErrorType": "scenarios.users.error_types",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'scenarios.users' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
