"""Agent specs: an agent described in YAML or JSON (model, tools, prompt, interventions, modes)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from agent.errors import UserFacingError
from agent.modes import StepLimits
from tools.mcp_client import McpServerConfig


class PluginSpec(BaseModel):
    """A plug-in by name with options."""

    model_config = ConfigDict(extra="forbid")
    name: str
    """Registered name."""
    options: dict[str, Any] = Field(default_factory=dict)
    """Keyword arguments for its factory."""


class McpToolsSpec(BaseModel):
    """A `tools:` entry that takes the tools of an MCP server: `{mcp: {command: …, args: […]}}` or
    `{mcp: {url: …, headers: {…}}}`, with `prefix`, `allow`, `needs_approval`, `timeout_s` (docs/mcp.md)."""

    model_config = ConfigDict(extra="forbid")
    mcp: McpServerConfig
    """How to reach the server and which of its tools to give the agent."""


class AgentSpec(BaseModel):
    """Everything needed to build an agent, as data."""

    model_config = ConfigDict(extra="forbid")
    name: str = "agent"
    """Agent name (also its model id when served)."""
    model: str = "local:qwen2.5-coder-1.5b"
    """Model by name: local:NAME, openai:NAME, echo, cassette:PATH."""
    model_options: dict[str, Any] = Field(default_factory=dict)
    """Adapter options (base_url, api_key, n_ctx, …)."""
    system_prompt: str = ""
    """The system prompt."""
    system_prompt_file: str | None = None
    """Read the system prompt from this file (relative to the spec) instead."""
    tools: list[str | McpToolsSpec] = Field(default_factory=list)
    """Toolkit names (builtin, recovery, retail, …), "module:attribute" paths of tools or toolkits,
    or MCP servers as `{mcp: {...}}` entries."""
    interventions: list[str | PluginSpec] = Field(default_factory=list)
    """Interventions by name (rein, npi, self-refine) or with options."""
    guardrails: list[str | PluginSpec] = Field(default_factory=list)
    """Guardrails by name (injection) or with options, e.g. {name: injection, options:
    {approve_next_write: true}} (docs/guardrails.md)."""
    mode: str | PluginSpec = "agentic"
    """A fixed mode (instant, reasoning, agentic) or a mode policy (self, offline, cost)."""
    mode_paths: Literal["plain", "a2fm"] = "plain"
    """plain: agentic is a bare tool loop; a2fm: agentic plans, acts, summarises and answers."""
    step_limits: dict[str, int] = Field(default_factory=dict)
    """Per-mode model-call caps, e.g. {agentic: 8}."""
    checkpointer: str = "sqlite"
    """memory, sqlite[:PATH] or postgres://…"""
    temperature: float | None = None
    """Sampling temperature."""
    max_tokens: int | None = None
    """Cap on generated tokens per call."""


def load_spec(source: str | Path | dict[str, Any] | AgentSpec) -> tuple[AgentSpec, Path | None]:
    """Parse a spec from a file or a dict; errors name the file, the field and the reason."""
    if isinstance(source, AgentSpec):
        return source, None
    path: Path | None = None
    if isinstance(source, dict):
        data: Any = source
    else:
        path = Path(source)
        if not path.is_file():
            raise UserFacingError(f"agent spec {path} does not exist")
        text = path.read_text(encoding="utf-8")
        try:
            if path.suffix in (".yaml", ".yml"):
                import yaml

                data = yaml.safe_load(text)
            else:
                data = json.loads(text)
        except Exception as exc:  # yaml and json raise different types; both mean unreadable
            raise UserFacingError(f"{path}: not valid {path.suffix.lstrip('.') or 'JSON'}: {exc}") from None
    try:
        return AgentSpec.model_validate(data), path
    except ValidationError as exc:
        where = str(path) if path else "agent spec"
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or '(root)'}: {e['msg']}" for e in exc.errors(include_url=False)
        )
        raise UserFacingError(f"{where}: {problems}") from None


def _beside(options: dict[str, Any], spec_path: Path | None) -> dict[str, Any]:
    """Plug-in options with relative `*_file` paths resolved against the spec's folder, as
    system_prompt_file is (a calibration file written beside the spec, say)."""
    if spec_path is None:
        return options
    return {k: str(spec_path.parent / v) if k.endswith("_file") and isinstance(v, str) and not Path(v).is_absolute() else v
            for k, v in options.items()}


def agent_options(source: Any, **overrides: Any) -> dict[str, Any]:
    """The keyword arguments of `Agent(...)` that a spec describes, with its model, tools and
    plug-ins built; keyword overrides replace spec fields (e.g. model=…, checkpointer=…).

    Agent.from_spec (agent/runtime.py) calls this; the spec never imports the runtime, so the
    two modules depend one way only.
    """
    from agent.messages import ModelSettings
    from agent.models import ModelError, resolve_model
    from agent.modes import A2FM_MODES, PLAIN_AGENTIC
    from agent.plugin_api import Intervention
    from agent.plugins import load_guardrail, load_intervention, load_mode_policy

    spec, path = load_spec(source)
    if overrides:
        spec = spec.model_copy(update={k: v for k, v in overrides.items() if v is not None})
    prompt = spec.system_prompt
    if spec.system_prompt_file:
        prompt_path = Path(spec.system_prompt_file)
        if path is not None and not prompt_path.is_absolute():
            prompt_path = path.parent / prompt_path
        prompt = prompt_path.read_text(encoding="utf-8")
    interventions: list[Intervention] = []
    for item in spec.interventions:
        plugin = item if isinstance(item, PluginSpec) else PluginSpec(name=item)
        built = load_intervention(plugin.name, **_beside(plugin.options, path))
        if built is not None:
            interventions.append(built)
    guardrails = [
        load_guardrail(g.name, **_beside(g.options, path))
        for g in (item if isinstance(item, PluginSpec) else PluginSpec(name=item) for item in spec.guardrails)
    ]
    mode = spec.mode if isinstance(spec.mode, PluginSpec) else PluginSpec(name=spec.mode)
    try:
        limits = StepLimits(**spec.step_limits)
    except TypeError as exc:
        raise UserFacingError(f"step_limits: {exc}") from None
    try:
        model = resolve_model(spec.model, **spec.model_options)
    except ModelError as exc:  # an unknown name, a missing API key: the spec's fault, said in one line
        raise UserFacingError(f"model: {exc}") from None
    except TypeError as exc:  # an option the adapter does not take
        raise UserFacingError(f"model_options: {exc}") from None
    return {
        "model": model,
        "tools": load_tools(spec.tools),
        "system_prompt": prompt,
        "interventions": interventions,
        "guardrails": guardrails,
        "mode_policy": load_mode_policy(mode.name, **mode.options),
        "step_limits": limits,
        "mode_config": A2FM_MODES if spec.mode_paths == "a2fm" else PLAIN_AGENTIC,
        "settings": ModelSettings(temperature=spec.temperature, max_tokens=spec.max_tokens),
        "checkpointer": spec.checkpointer,
        "name": spec.name,
    }


def load_tools(names: Sequence[str | McpToolsSpec]) -> list[Any]:
    """Tools from toolkit names or "module:attribute" paths, without duplicates.

    A path must name a rein Tool, a Toolkit, a list of Tools, or a function marked
    @tools.toolkit_factory; any other object is refused without being called.
    """
    from tools import Toolkit, load_toolkit
    from tools.registry import load_tools_at

    out = Toolkit(name="agent")
    for name in names:
        if isinstance(name, McpToolsSpec):
            items = _load_mcp(name.mcp)
        else:
            try:
                items = list(load_tools_at(name) if ":" in name else load_toolkit(name))
            except (KeyError, ImportError, AttributeError, ValueError) as exc:
                # KeyError's str() is the repr of its message; show the message itself.
                reason = exc.args[0] if isinstance(exc, KeyError) and exc.args else exc
                raise UserFacingError(f"tools: cannot load {name!r}: {reason}") from None
        for t in items:
            if t.name not in out:
                out.add(t)
    return list(out)


def _load_mcp(config: McpServerConfig) -> list[Any]:
    """The tools of one MCP server, listed now in a short-lived session (see docs/mcp.md)."""
    from tools.mcp_client import McpToolset

    try:
        return McpToolset(config).tools()
    except (ImportError, ConnectionError, ValueError) as exc:
        raise UserFacingError(f"tools: cannot load MCP server {config.label!r}: {exc}") from None
