"""The A2A side of the server: one a2a-sdk request handler, task store and agent card per agent.

`agent.server.a2a` routes requests here once the key is checked; this module holds everything
that needs a2a-sdk (the `a2a` extra).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from agent.extras import needs_extra
from agent.server.a2a_executor import TENANT, ReinExecutor
from agent.server.a2a_tasks import A2AOwner, TaskStores
from agent.server.chat_turns import ServerState

with needs_extra("a2a", "the A2A endpoint"):
    from a2a.extensions.common import HTTP_EXTENSION_HEADER, get_requested_extensions
    from a2a.server.context import ServerCallContext
    from a2a.server.request_handlers import DefaultRequestHandler
    from a2a.server.request_handlers.response_helpers import agent_card_to_dict
    from a2a.server.routes import ServerCallContextBuilder, create_jsonrpc_routes
    from a2a.types.a2a_pb2 import (
        AgentCapabilities,
        AgentCard,
        AgentInterface,
        AgentSkill,
        HTTPAuthSecurityScheme,
        SecurityRequirement,
        SecurityScheme,
        StringList,
    )
    from a2a.utils.constants import PROTOCOL_VERSION_0_3, PROTOCOL_VERSION_1_0, TransportProtocol

with needs_extra("server", "rein's HTTP server"):
    from starlette.requests import Request
    from starlette.responses import Response

BEARER = "bearer"
"""Name of the security scheme the card declares when the server has API keys."""

SECRET_HEADERS = frozenset({"authorization", "cookie", "proxy-authorization"})
"""Request headers left out of the A2A call context."""

Endpoint = Callable[[Request], Awaitable[Response]]


@dataclass
class A2AAgent:
    """One served agent's A2A endpoint."""

    card: AgentCard
    """Its agent card, with the interface URL relative to the server (made absolute per request)."""
    handler: DefaultRequestHandler
    """a2a-sdk's request handler, running messages through `ReinExecutor`."""
    rpc: Endpoint
    """a2a-sdk's JSON-RPC endpoint (A2A 1.0 method names, and 0.3's: message/send, …)."""


class A2AService:
    """The A2A endpoints of every served agent."""

    def __init__(self, state: ServerState) -> None:
        self.state = state
        self.stores = TaskStores()
        self.agents: dict[str, A2AAgent] = {}
        for name, agent in state.agents.items():
            card = _card(name, agent, state.keys.enabled)
            handler = DefaultRequestHandler(
                agent_executor=ReinExecutor(state, name),
                task_store=self.stores.for_checkpointer(agent.checkpointer_spec),
                agent_card=card,
            )
            rpc = create_jsonrpc_routes(handler, "/", context_builder=_OwnerContext(name), enable_v0_3_compat=True)
            self.agents[name] = A2AAgent(card, handler, rpc[0].endpoint)

    def card(self, name: str, base_url: str) -> dict[str, Any]:
        """The agent card as JSON, its interfaces pointing at this server's `base_url`."""
        card = AgentCard()
        card.CopyFrom(self.agents[name].card)
        for interface in card.supported_interfaces:
            interface.url = base_url.rstrip("/") + interface.url
        return agent_card_to_dict(card)

    async def open(self) -> None:
        """Create the task tables (after the agents' checkpointers have made their databases)."""
        await self.stores.open()

    async def aclose(self) -> None:
        """Let running tasks finish their events, then close the task databases."""
        for entry in self.agents.values():
            await entry.handler.aclose()
        await self.stores.aclose()


class _OwnerContext(ServerCallContextBuilder):
    """The call context of a request whose key `agent.server.a2a` has checked: its owner (tenant
    and agent) scopes the tasks it reaches, and its tenant owns the thread its turns run on."""

    def __init__(self, agent: str) -> None:
        self.agent = agent

    def build(self, request: Request) -> ServerCallContext:
        tenant = request.state.rein_tenant
        # a2a-sdk reads headers (A2A-Version) from the state; the key stays out of it.
        headers = {k: v for k, v in request.headers.items() if k not in SECRET_HEADERS}
        return ServerCallContext(
            user=A2AOwner(self.agent, tenant),
            state={TENANT: tenant, "headers": headers},
            requested_extensions=get_requested_extensions(request.headers.getlist(HTTP_EXTENSION_HEADER)),
        )


def _card(name: str, agent: Any, keyed: bool) -> AgentCard:
    path = f"/a2a/{quote(name, safe='')}/"
    tools = sorted(agent.tools.as_dict())
    card = AgentCard(
        name=name,
        description=f"The rein agent {name!r}" + (f", with the tools {', '.join(tools)}" if tools else ""),
        version="1.0.0",
        supported_interfaces=[
            AgentInterface(url=path, protocol_binding=TransportProtocol.JSONRPC, protocol_version=v)
            for v in (PROTOCOL_VERSION_1_0, PROTOCOL_VERSION_0_3)
        ],
        capabilities=AgentCapabilities(streaming=True, push_notifications=False),
        default_input_modes=["text/plain"],
        default_output_modes=["text/plain"],
        skills=[AgentSkill(id="chat", name=name, description="Answers a message; a contextId continues the conversation.", tags=["chat"])],
    )
    if keyed:
        card.security_schemes[BEARER].CopyFrom(
            SecurityScheme(http_auth_security_scheme=HTTPAuthSecurityScheme(scheme="Bearer", description="a key of the server's API keys"))
        )
        card.security_requirements.append(SecurityRequirement(schemes={BEARER: StringList()}))
    return card
