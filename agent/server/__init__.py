"""rein's OpenAI-compatible HTTP server: chat completions (streamed or not) over persistent
threads, with bearer-key auth and threads isolated per tenant. `create_app` builds the FastAPI
app; `rein serve` runs it."""

from agent.server.app import create_app
from agent.server.auth import ApiKey, ApiKeys, key_id, load_api_keys
from agent.server.background import BackgroundServer
from agent.server.chat_turns import ServerConfig, ServerState, TurnOutcome
from agent.server.errors import ApiError
from agent.server.threads import storage_id

__all__ = [
    "ApiError",
    "ApiKey",
    "ApiKeys",
    "BackgroundServer",
    "ServerConfig",
    "ServerState",
    "TurnOutcome",
    "create_app",
    "key_id",
    "load_api_keys",
    "storage_id",
]
