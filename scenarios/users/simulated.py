"""The LLM-simulated user, following tau2-bench's user-simulator guidelines, over any rein Model."""

from __future__ import annotations

import re

from agent.ledger import CostLedger, PriceTable
from agent.messages import Message, ModelRequest, ModelSettings
from agent.models.base import Model
from scenarios.scenario import SimulatedUserConfig, StrictInstructions
from scenarios.tau2_tasks import StructuredInstructions
from scenarios.users.base import (
    OUT_OF_SCOPE,
    STOP,
    TRANSFER,
    User,
    UserReply,
    UserSimulationError,
    UserView,
    strip_signals,
)

GUIDELINES = f"""You play a customer talking to a customer-service agent in a chat. Stay in that role:
you are the customer, never the agent, and you never call tools.

How to behave:
- Write one message at a time, short and natural, the way a real customer types in a chat.
- Follow your scenario below. Never invent facts it does not give you: anything it does not
  state is something you do not know or do not have.
- Do not reveal everything at once. Start with your request and give further details (names,
  ids, preferences) only when they become relevant or the agent asks for them.
- Say things in your own words; do not copy the scenario text verbatim.
- When your goal is reached, or it clearly cannot be reached, reply with {STOP} on its own.
- If the agent transfers you to a human or another agent, reply with {TRANSFER} on its own.
- If the agent asks for something your scenario does not cover at all and you cannot
  continue, reply with {OUT_OF_SCOPE} on its own.
- Never end the conversation before you have made your request."""

OPEN_PROMPT = "(The agent is waiting. Write your first message.)"
RETRY_PROMPT = "(Your last reply was empty. Write the customer's next message.)"
_ROLE_PREFIX = re.compile(r"^\s*(?:customer|user)\s*:\s*", re.IGNORECASE)


def format_instructions(instructions: str | StructuredInstructions) -> str:
    """The scenario text shown to the simulator."""
    if isinstance(instructions, str):
        return instructions.strip()
    parts: list[tuple[str, str | None]] = [("Reason for your call", instructions.reason_for_call)]
    parts += [("What you know", instructions.known_info), ("What you do not know", instructions.unknown_info)]
    parts += [("How to behave", instructions.task_instructions)]
    return "\n\n".join(f"{title}:\n{text.strip()}" for title, text in parts if text and text.strip() not in ("", "."))


def system_prompt(persona: str | None, instructions: str | StructuredInstructions) -> str:
    """The simulator's full system prompt: guidelines, persona, scenario."""
    text = GUIDELINES
    if persona:
        text += f"\n\n# Your persona\n{persona.strip()}"
    return text + f"\n\n# Your scenario\n{format_instructions(instructions)}"


class SimulatedUser(User):
    """A user played by a model: it sees the dialogue with roles flipped (the agent speaks as
    "user") and answers one message at a time, seeded per turn.

    Guards against the usual simulator failures: an empty reply is retried once, and a stop
    token before the user has made any request is an error, not a silent early end.
    """

    name = "simulated"

    def __init__(
        self,
        model: Model,
        instructions: str | StructuredInstructions,
        persona: str | None = None,
        *,
        seed: int = 0,
        temperature: float = 0.0,
        prices: PriceTable | None = None,
    ) -> None:
        self.model = model
        self.system = system_prompt(persona, instructions)
        self.seed = seed
        self.temperature = temperature
        self.prices = prices or PriceTable()

    @classmethod
    def from_config(cls, config: SimulatedUserConfig, model: Model, seed: int = 0) -> SimulatedUser:
        """A simulated user from its scenario config."""
        instructions: str | StructuredInstructions = config.instructions
        if isinstance(instructions, StrictInstructions):
            instructions = StructuredInstructions(**instructions.model_dump())
        return cls(model, instructions, config.persona, seed=seed, temperature=config.temperature)

    def request(self, view: UserView, retry: bool = False) -> ModelRequest:
        """The model request for this turn."""
        messages = [Message.system(self.system)]
        for m in view.dialogue:
            # The simulator is the "assistant" of its own conversation; the agent is its "user".
            messages.append(Message(role="user" if m.role == "assistant" else "assistant", content=m.text))
        if len(messages) == 1 or messages[-1].role == "assistant":
            messages.append(Message.user(OPEN_PROMPT))
        if retry:
            messages.append(Message.user(RETRY_PROMPT))
        settings = ModelSettings(temperature=self.temperature, seed=self.seed * 1000 + view.turn, tool_choice="none")
        return ModelRequest(messages=messages, settings=settings)

    async def respond(self, view: UserView) -> UserReply:
        ledger = CostLedger()
        for attempt in range(2):
            try:
                response = await self.model.complete(self.request(view, retry=attempt > 0))
            except Exception as exc:  # any adapter failure ends the run as user_error
                raise UserSimulationError(f"user model {self.model.name!r} failed: {type(exc).__name__}: {exc}") from exc
            ledger.book_model(response.model or self.model.name, response.usage, self.prices, label="user_sim")
            text = _ROLE_PREFIX.sub("", response.text or "").strip()
            if not text:
                continue
            reply = UserReply(text, reasoning=response.reasoning, ledger=ledger)
            if reply.signal is not None and view.turn == 0 and not strip_signals(text):
                raise UserSimulationError(
                    f"the simulated user ended the conversation ({reply.signal}) before making any request"
                )
            return reply
        raise UserSimulationError("the simulated user gave an empty message twice")
