"""The agent files (research/rein/agents/*.yaml): agents as teams build them, and turns labelled
against each agent's own tools. SCHEMA.md beside them describes the format."""

from __future__ import annotations

from functools import cached_property
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from interventions.card import CapabilityCard, build_card

AGENTS_DIR = Path(__file__).resolve().parent / "agents"
ERROR_LISTS = ("unsupported_operation", "unsupported_parameter", "vague_reference", "ambiguous_interpretation",
               "contradiction")
"""The error lists an agent file holds (unsupported_domain turns come from other agents' requests)."""


class Item(BaseModel):
    """One user turn of an agent file."""

    model_config = ConfigDict(extra="forbid")

    text: str
    """The user's turn."""
    context: str = ""
    """The agent's turn right before it ("" when the user opens)."""
    tool: str | None = None
    """For unsupported_parameter: the tool whose enum or limit the turn breaks."""


class AgentFile(BaseModel):
    """One agent: its system prompt, its tools, and its labelled turns."""

    model_config = ConfigDict(extra="forbid")

    domain: str
    """The agent's domain (the file's name)."""
    source: str
    """synthesized, tau2, rein_toolkit or mcp:<server>."""
    general_purpose: bool = False
    """Whether the agent is a general assistant."""
    system_prompt: str
    """Its system prompt."""
    tools: list[dict[str, Any]] = Field(default_factory=list)
    """Its tools: {name, description, parameters}."""
    ordinary: list[Item]
    """Requests it can serve."""
    hard_negatives: list[Item] = Field(default_factory=list)
    """Turns that look like errors but are fine for it."""
    unsupported_operation: list[Item] = Field(default_factory=list)
    """In its domain, but no tool does it."""
    unsupported_parameter: list[Item] = Field(default_factory=list)
    """An operation it has, with a value outside the tool's enum or limits."""
    vague_reference: list[Item] = Field(default_factory=list)
    """A reference that more than one thing fits."""
    ambiguous_interpretation: list[Item] = Field(default_factory=list)
    """A request with two readings that lead to different actions."""
    contradiction: list[Item] = Field(default_factory=list)
    """A request that contradicts itself or the context."""

    @field_validator("ordinary", "hard_negatives", *ERROR_LISTS, mode="before")
    @classmethod
    def _items(cls, value: Any) -> Any:
        return [{"text": v} if isinstance(v, str) else v for v in value or []]

    @property
    def schemas(self) -> list[dict[str, Any]]:
        """The tools as OpenAI function schemas."""
        return [{"type": "function", "function": {"name": t["name"], "description": t.get("description", ""),
                                                  "parameters": t.get("parameters") or {"type": "object", "properties": {}}}}
                for t in self.tools]

    @cached_property
    def card(self) -> CapabilityCard:
        """The agent's capability card, as ReIn builds it at run time."""
        return build_card(self.schemas, self.system_prompt)


def load_agents(folder: Path = AGENTS_DIR) -> list[AgentFile]:
    """Every agent file in folder, validated; a clear error names the file at fault."""
    out = []
    for path in sorted(folder.glob("*.yaml")):
        try:
            agent = AgentFile.model_validate(yaml.safe_load(path.read_text(encoding="utf-8")))
        except (yaml.YAMLError, ValidationError) as exc:
            raise ValueError(f"{path.name}: {exc}") from None
        if agent.domain != path.stem:
            raise ValueError(f"{path.name}: domain {agent.domain!r} differs from the file name")
        out.append(agent)
    return out
