"""Models by name: `local:qwen2.5-coder-1.5b` (default), `local:qwen2.5-coder-0.5b` (faster), `openai:MODEL`,
`scripted`, `echo`; the embedded models are listed in agent.models.gguf.LOCAL_MODELS.

Adapters are imported only when asked for, so choosing a test model never loads llama.cpp or
the openai SDK.
"""

from __future__ import annotations

from typing import Any

from agent.models.base import Model, ModelError, ReasoningDelta, StreamItem, TextDelta
from agent.models.cassette import CassetteModel
from agent.models.testing import EchoModel, FunctionModel, ScriptedModel, call, calls, reply

DEFAULT_MODEL = "local:qwen2.5-coder-1.5b"
"""The default embedded model. The 1.5B, not the faster 0.5B: with ReIn on, the 1.5B answers the
README agent's 20 ordinary requests correctly and makes the demo's asked write alone, where the
0.5B calls tools it was not asked to and writes what nobody asked for (docs/models.md)."""


def resolve_model(spec: str | Model | None = None, **options: Any) -> Model:
    """Build a model from a name like `local:qwen2.5-coder-0.5b` or `openai:gpt-4o-mini`.

    options go to the adapter (e.g. base_url, api_key for openai; n_ctx, seed for local).
    """
    if isinstance(spec, Model):
        return spec
    spec = spec or DEFAULT_MODEL
    provider, _, name = spec.partition(":")
    if provider == "local":
        from agent.extras import check_extra
        from agent.models.local import LocalModel

        # Here, not at the first generation, where the runtime would turn it into a model_error.
        check_extra("local", "the embedded model", "llama_cpp")

        return LocalModel(name or DEFAULT_MODEL.partition(":")[2], **options)
    if provider == "openai":
        from agent.models.openai_compat import OpenAIModel

        return OpenAIModel(name or None, **options)
    if provider == "echo":
        return EchoModel()
    if provider == "scripted":
        return ScriptedModel(options.get("steps", ()), name=name or "scripted")
    if provider == "cassette":
        inner = options.pop("inner", None)
        return CassetteModel(name, inner=resolve_model(inner, **options) if inner else None,
                             mode="auto" if inner else "replay")
    raise ModelError(
        f"unknown model {spec!r}; known: local:NAME, openai:NAME (with --base-url for other servers), "
        "cassette:PATH, echo, scripted"
    )


__all__ = [
    "DEFAULT_MODEL",
    "CassetteModel",
    "EchoModel",
    "FunctionModel",
    "Model",
    "ModelError",
    "ReasoningDelta",
    "ScriptedModel",
    "StreamItem",
    "TextDelta",
    "call",
    "calls",
    "reply",
    "resolve_model",
]
