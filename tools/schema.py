"""Build a tool's JSON schema and argument model from a typed Python signature and its docstring."""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable
from typing import Any, get_type_hints

from pydantic import BaseModel, ConfigDict, Field, create_model

_SECTION = re.compile(r"^\s*(Args|Arguments|Parameters|Returns|Raises|Yields|Examples?)\s*:\s*$")
_ARG_LINE = re.compile(r"^\s*(\*{0,2}\w+)\s*(\([^)]*\))?\s*:\s*(.*)$")


def parse_docstring(doc: str | None) -> tuple[str, dict[str, str]]:
    """Split a Google-style docstring into its description and a map of argument descriptions."""
    if not doc:
        return "", {}
    lines = inspect.cleandoc(doc).splitlines()
    description: list[str] = []
    args: dict[str, str] = {}
    section: str | None = None
    current: str | None = None
    for line in lines:
        header = _SECTION.match(line)
        if header:
            section = header.group(1)
            current = None
            continue
        if section is None:
            description.append(line)
        elif section in ("Args", "Arguments", "Parameters"):
            m = _ARG_LINE.match(line)
            # A new argument starts at the section's base indent; deeper lines continue the last one.
            if m and (current is None or len(line) - len(line.lstrip()) <= _indent_of(lines, current)):
                current = m.group(1).lstrip("*")
                args[current] = m.group(3).strip()
            elif current and line.strip():
                args[current] = f"{args[current]} {line.strip()}".strip()
    return "\n".join(description).strip(), args


def _indent_of(lines: list[str], name: str) -> int:
    for line in lines:
        m = _ARG_LINE.match(line)
        if m and m.group(1).lstrip("*") == name:
            return len(line) - len(line.lstrip())
    return 0


def model_from_signature(fn: Callable[..., Any], name: str, arg_docs: dict[str, str]) -> type[BaseModel]:
    """A pydantic model whose fields are the function's parameters, described by the docstring."""
    # include_extras keeps Annotated[int, Field(ge=1, le=20)]: its bounds belong in the schema and the checks.
    hints = get_type_hints(fn, include_extras=True)
    fields: dict[str, Any] = {}
    for pname, param in inspect.signature(fn).parameters.items():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD) or pname in ("self", "cls"):
            continue
        annotation = hints.get(pname, Any)
        default = ... if param.default is inspect.Parameter.empty else param.default
        fields[pname] = (annotation, Field(default, description=arg_docs.get(pname) or None))
    camel = "".join(part.capitalize() for part in re.split(r"[^0-9A-Za-z]+", name) if part)
    return create_model(
        f"{camel or 'Tool'}Args", __config__=ConfigDict(extra="forbid"), **fields
    )


def json_schema_for(model: type[BaseModel]) -> dict[str, Any]:
    """An OpenAI-style parameters schema: an object with properties, required and no extras."""
    schema = model.model_json_schema()
    schema.pop("title", None)
    for prop in schema.get("properties", {}).values():
        if isinstance(prop, dict):
            prop.pop("title", None)
    schema.setdefault("properties", {})
    schema.setdefault("required", [])
    schema["additionalProperties"] = False
    return schema
