"""The error-injecting user: wraps any user and, at chosen turns, sends an ambiguous or
unsupported request (the ReIn paper's six error types) before carrying on with its own turns."""

from __future__ import annotations

import random

from agent.ledger import CostLedger, PriceTable
from agent.messages import Message, ModelRequest, ModelSettings
from agent.models.base import Model
from scenarios.scenario import InjectedError
from scenarios.users.base import SIGNALS, User, UserReply, UserView
from scenarios.users.error_templates import ErrorContext, template_turn
from scenarios.users.error_types import ERROR_TYPES

LLM_PROMPT = """You write one chat message that a customer sends to a customer-service agent ({domain} domain).
The message must contain this kind of user error: {name} ({category} request).
{description}
Use these facts from the customer's situation where they fit: {facts}
An example of such a message: "{example}"
Write only the customer's message, one or two sentences, no quotes, no explanation."""


class ErrorInjectingUser(User):
    """Sends each injected error at its turn, then lets the wrapped user continue where it was.

    Without a model (or with generator "template") the error text comes from templates filled
    with the task's own data (order ids, items, reservation ids, tasks); with generator "llm" and
    a model, the model phrases it, falling back to the template when it answers nothing usable.
    """

    name = "error-injecting"

    def __init__(
        self,
        base: User,
        errors: list[InjectedError],
        context: ErrorContext,
        *,
        model: Model | None = None,
        seed: int = 0,
        prices: PriceTable | None = None,
    ) -> None:
        self.base = base
        self.pending = sorted(errors, key=lambda e: e.turn)
        self.context = context
        self.model = model
        self.rng = random.Random(seed)
        self.seed = seed
        self.prices = prices or PriceTable()
        self.injected: list[dict[str, object]] = []

    async def respond(self, view: UserView) -> UserReply:
        if self.pending and self.pending[0].turn <= view.turn:
            return await self._inject(self.pending.pop(0), view)
        inner = UserView(view.dialogue, view.turn - len(self.injected), view.tool_calls)
        return await self.base.respond(inner)

    async def _inject(self, error: InjectedError, view: UserView) -> UserReply:
        kind = ERROR_TYPES[error.type]
        template_text, template = template_turn(error.type, self.context, self.rng)
        ledger = CostLedger()
        generator = "given" if error.text else "template"
        text = error.text or template_text
        if not error.text and error.generator == "llm" and self.model is not None:
            generated = await self._generate(error, template_text, view, ledger)
            if generated:
                text, generator = generated, "llm"
        record = {
            "injected_error": kind.name,
            "category": kind.category,
            "recovery_tool": kind.recovery_tool,
            "turn": view.turn,
            "generator": generator,
            "template": template if generator == "template" else None,
            "entities": {k: v for k, v in self.context.values().items() if not k.startswith("many_")},
        }
        self.injected.append(record)
        return UserReply(text, ledger=ledger, record=record)

    async def _generate(self, error: InjectedError, example: str, view: UserView, ledger: CostLedger) -> str:
        assert self.model is not None
        kind = ERROR_TYPES[error.type]
        facts = ", ".join(f"{k}={v}" for k, v in self.context.values().items() if not k.startswith("many_"))
        prompt = LLM_PROMPT.format(
            domain=self.context.domain,
            name=kind.name.replace("_", " "),
            category=kind.category,
            description=kind.description,
            facts=facts or "none",
            example=example,
        )
        request = ModelRequest(
            messages=[Message.system(prompt), Message.user("Write the message now.")],
            settings=ModelSettings(temperature=0.0, seed=self.seed * 1000 + view.turn, tool_choice="none"),
        )
        try:
            response = await self.model.complete(request)
        except Exception:  # the template is a sound fallback; the record says which was used
            return ""
        ledger.book_model(response.model or self.model.name, response.usage, self.prices, label="user_sim")
        text = response.text.strip().strip('"').strip()
        return "" if not text or any(token in text for token in SIGNALS) else text
