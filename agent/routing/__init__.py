"""Mode routing (A²FM): choose instant, reasoning or agentic for each turn.

SelfRouter lets the model announce the mode with a leading `<classification>` tag; OfflineRouter
is a small classifier shipped with the package; CostAwareRouter picks the cheapest mode whose
predicted success clears a threshold. agent.plugin_api.FixedMode always picks one mode.
"""

from __future__ import annotations

from agent.plugin_api import FixedMode
from agent.routing.cost import DEFAULT_MODE_COSTS, CostAwareRouter, ModeCost
from agent.routing.offline import OfflineRouter, RouterWeights
from agent.routing.router_eval import RouterReport, load_labeled, score_routes
from agent.routing.self_router import SelfRouter, classification_tag, parse_classification

__all__ = [
    "DEFAULT_MODE_COSTS",
    "CostAwareRouter",
    "FixedMode",
    "ModeCost",
    "OfflineRouter",
    "RouterReport",
    "RouterWeights",
    "SelfRouter",
    "classification_tag",
    "load_labeled",
    "parse_classification",
    "score_routes",
]
