"""Embed rein in an existing FastAPI app: the shop's own routes plus an OpenAI-compatible agent.

rein's app is mounted under /rein, so any OpenAI client talks to the agent at
http://HOST:PORT/rein/v1 while the shop keeps its own routes. A mounted app's lifespan does not
run by itself, so the parent's lifespan runs rein's: it opens the threads database at startup and,
at shutdown, waits for running turns before closing it.

    python docs/examples/embed_fastapi.py          # serves on http://127.0.0.1:8000

then, from any OpenAI client:

    OpenAI(base_url="http://127.0.0.1:8000/rein/v1", api_key="shop-secret").chat.completions.create(
        model="support", messages=[{"role": "user", "content": "Where is order A-1?"}])
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterable

from fastapi import FastAPI, HTTPException

from agent.models import Model
from agent.runtime import Agent
from agent.server import create_app
from tools import ToolKind, tool

ORDERS = {"A-1": "shipped", "A-2": "processing"}


@tool(kind=ToolKind.READ)
def order_status(order_id: str) -> str:
    """Look up the status of a shop order.

    Args:
        order_id: The order's id, such as 'A-1'.
    """
    return ORDERS.get(order_id, f"no order {order_id}")


def build_app(
    db_path: str = "shop-threads.sqlite",
    model: Model | str | None = None,
    api_keys: Iterable[str] = ("shop-secret",),
) -> FastAPI:
    """The shop app with the support agent mounted at /rein.

    model: None for rein's embedded local model; any model name or Model object otherwise.
    """
    support = Agent(
        model=model,
        tools=[order_status],
        system_prompt="You are the shop's support agent. Look orders up before answering.",
        checkpointer=f"sqlite:{db_path}",
        name="support",
    )
    rein_app = create_app({"support": support}, api_keys=api_keys)

    @contextlib.asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        async with rein_app.router.lifespan_context(rein_app):
            yield

    shop = FastAPI(title="shop", lifespan=lifespan)

    @shop.get("/orders/{order_id}")
    def get_order(order_id: str) -> dict[str, str]:
        if order_id not in ORDERS:
            raise HTTPException(404, f"no order {order_id}")
        return {"id": order_id, "status": ORDERS[order_id]}

    shop.mount("/rein", rein_app)
    return shop


if __name__ == "__main__":
    import uvicorn

    uvicorn.run(build_app(), host="127.0.0.1", port=8000)
