"""Chat messages, tool calls and model responses: the types every model adapter speaks."""

from __future__ import annotations

import json
import uuid
from typing import Any, Literal

from pydantic import BaseModel, Field

Role = Literal["system", "user", "assistant", "tool"]
FinishReason = Literal["stop", "tool_calls", "length", "content_filter", "error"]
PART_SEPARATOR = "\n"
"""Joins the text parts of one message into its text."""


def new_call_id() -> str:
    """A fresh tool-call id, for calls whose server gave none."""
    return f"call_{uuid.uuid4().hex[:16]}"


class ToolCall(BaseModel):
    """A tool call made by the model."""

    id: str = Field(default_factory=new_call_id)
    """Id that the answering tool message refers to."""
    name: str
    """Name of the tool called."""
    arguments: str = "{}"
    """Arguments as JSON text, exactly as the model produced them (it may be invalid)."""

    def parsed_arguments(self) -> dict[str, Any] | None:
        """The arguments decoded as a JSON object, or None when they are not one."""
        try:
            value = json.loads(self.arguments or "{}")
        except json.JSONDecodeError:
            return None
        return value if isinstance(value, dict) else None


class Message(BaseModel):
    """One message in a conversation, in OpenAI chat roles."""

    role: Role
    """system, user, assistant or tool."""
    content: str | list[dict[str, Any]] = ""
    """Text, or OpenAI content parts (text and image_url) for multimodal input."""
    reasoning: str | None = None
    """The model's reasoning for an assistant message; kept in the history."""
    tool_calls: list[ToolCall] = Field(default_factory=list)
    """Tool calls made by an assistant message."""
    tool_call_id: str | None = None
    """For a tool message: the call it answers."""
    name: str | None = None
    """For a tool message: the tool's name."""
    is_error: bool = False
    """For a tool message: whether the call failed."""
    metadata: dict[str, Any] = Field(default_factory=dict)
    """rein's own annotations (e.g. which intervention planted this message); never sent to models."""

    @property
    def text(self) -> str:
        """The text content; several text parts are joined with a newline, as separate parts
        (paragraphs a client sent apart) must not run into each other's words."""
        if isinstance(self.content, str):
            return self.content
        return PART_SEPARATOR.join(p.get("text", "") for p in self.content if p.get("type") == "text")

    @classmethod
    def system(cls, text: str) -> Message:
        """A system message."""
        return cls(role="system", content=text)

    @classmethod
    def user(cls, text: str | list[dict[str, Any]]) -> Message:
        """A user message."""
        return cls(role="user", content=text)

    @classmethod
    def assistant(cls, text: str = "", tool_calls: list[ToolCall] | None = None, reasoning: str | None = None) -> Message:
        """An assistant message."""
        return cls(role="assistant", content=text, tool_calls=tool_calls or [], reasoning=reasoning)

    @classmethod
    def tool(cls, call_id: str, name: str, text: str, is_error: bool = False) -> Message:
        """A tool message answering call_id."""
        return cls(role="tool", content=text, tool_call_id=call_id, name=name, is_error=is_error)


class Usage(BaseModel):
    """Tokens used by one or more model calls."""

    input_tokens: int = 0
    """Prompt tokens."""
    output_tokens: int = 0
    """Completion tokens (reasoning included)."""
    requests: int = 0
    """Number of model requests."""

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            requests=self.requests + other.requests,
        )

    @property
    def total_tokens(self) -> int:
        """Input plus output tokens."""
        return self.input_tokens + self.output_tokens


class ModelResponse(BaseModel):
    """What a model returned for one request."""

    text: str = ""
    """Visible answer text."""
    reasoning: str | None = None
    """Reasoning content, when the model produced any."""
    tool_calls: list[ToolCall] = Field(default_factory=list)
    """Tool calls requested by the model."""
    usage: Usage = Field(default_factory=Usage)
    """Tokens used by this request."""
    finish_reason: FinishReason = "stop"
    """Why generation stopped."""
    model: str = ""
    """Name of the model that answered."""

    def to_message(self) -> Message:
        """The assistant message this response adds to the history."""
        return Message.assistant(self.text, list(self.tool_calls), self.reasoning)


class ModelSettings(BaseModel):
    """Sampling settings for one request."""

    temperature: float | None = None
    """Sampling temperature; None leaves the model's default."""
    max_tokens: int | None = None
    """Cap on generated tokens."""
    seed: int | None = None
    """Seed for models that support one."""
    tool_choice: Literal["auto", "required", "none"] | None = None
    """Whether tools may, must or must not be called."""
    allowed_tools: list[str] | None = None
    """Of the offered tools, the ones that may be called on this request (None: all). The others
    stay offered, so a prompt that lists the tools (and its cached state) does not change."""
    stop: list[str] | None = None
    """Stop sequences."""


class ModelRequest(BaseModel):
    """Everything a model needs for one completion."""

    messages: list[Message]
    """The conversation so far, system prompt first."""
    tools: list[dict[str, Any]] = Field(default_factory=list)
    """Tools offered, as OpenAI function schemas."""
    settings: ModelSettings = Field(default_factory=ModelSettings)
    """Sampling settings."""
    response_format: dict[str, Any] | None = None
    """JSON schema the answer must follow ({"type": "json_schema", ...}), when structured output is needed."""
