"""rein's runtime: models, the LangGraph agent, persistence and streaming. The command line
(agent.cli) and the server (agent.server) sit on top of it; see docs/architecture.md.

Names are imported on first use, so `import agent` (and `rein --help`) stay fast and never load
torch, chromadb or llama.cpp.
"""

from __future__ import annotations

from agent.lazy import lazy_exports

_EXPORTS = {
    "Agent": "agent.runtime",
    "RunResult": "agent.run_result",
    "AgentSpec": "agent.spec",
    "load_spec": "agent.spec",
    "StreamEvent": "agent.events",
    "FixedMode": "agent.plugin_api",
    "Intervention": "agent.plugin_api",
    "InterventionContext": "agent.plugin_api",
    "ModeDecision": "agent.plugin_api",
    "ModePolicy": "agent.plugin_api",
    "Plant": "agent.plugin_api",
    "CostLedger": "agent.ledger",
    "PriceTable": "agent.ledger",
    "Message": "agent.messages",
    "ModelRequest": "agent.messages",
    "ModelResponse": "agent.messages",
    "ModelSettings": "agent.messages",
    "ToolCall": "agent.messages",
    "Usage": "agent.messages",
    "FunctionModel": "agent.models",
    "Model": "agent.models",
    "ModelError": "agent.models",
    "ScriptedModel": "agent.models",
    "resolve_model": "agent.models",
    "StepLimits": "agent.modes",
    "ThreadBusy": "agent.errors",
}

__all__ = sorted(_EXPORTS)


__getattr__ = lazy_exports(__name__, _EXPORTS)
