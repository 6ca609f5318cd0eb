"""The model interface: one small async class with complete and stream."""

from __future__ import annotations

import abc
from collections.abc import AsyncIterator
from dataclasses import dataclass

from agent.messages import ModelRequest, ModelResponse


class ModelError(Exception):
    """A model request failed for good (after retries, or for a reason retrying cannot fix)."""


@dataclass(frozen=True)
class TextDelta:
    """A piece of answer text produced while streaming."""

    text: str
    """The new text."""


@dataclass(frozen=True)
class ReasoningDelta:
    """A piece of reasoning produced while streaming."""

    text: str
    """The new reasoning text."""


StreamItem = TextDelta | ReasoningDelta | ModelResponse
"""Stream items: deltas, then exactly one final ModelResponse."""


class Model(abc.ABC):
    """A chat model. Implementations: OpenAI-compatible, embedded local, scripted, function, cassette."""

    name: str = "model"

    @abc.abstractmethod
    async def complete(self, request: ModelRequest) -> ModelResponse:
        """Answer one request."""

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamItem]:
        """Yield deltas as they are produced, then the final response.

        The default answers in one piece; adapters that can stream override it.
        """
        response = await self.complete(request)
        if response.reasoning:
            yield ReasoningDelta(response.reasoning)
        if response.text:
            yield TextDelta(response.text)
        yield response

    async def aclose(self) -> None:
        """Release resources (connections, loaded weights)."""  # noqa: B027 - optional hook
        return None
