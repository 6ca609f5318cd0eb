"""MCP tool schemas as rein sees them: the parameters shown to the model, and argument checking."""

from __future__ import annotations

import copy
from typing import Any

from tools.errors import ToolArgumentError
from tools.tool import ToolKind


def tool_parameters(input_schema: dict[str, Any]) -> dict[str, Any]:
    """The MCP tool's inputSchema as a rein `parameters` schema: an object with properties.

    Titles are dropped (pydantic-built servers add one per field), as rein's own schemas do:
    they repeat the names and cost small models context. Everything else is kept as sent.
    """
    schema = copy.deepcopy(input_schema) if isinstance(input_schema, dict) else {}
    schema.pop("title", None)
    schema.setdefault("type", "object")
    properties = schema.setdefault("properties", {})
    if isinstance(properties, dict):
        for prop in properties.values():
            if isinstance(prop, dict):
                prop.pop("title", None)
    return schema


class ArgumentChecker:
    """Validates a call's arguments against a JSON schema, with the validator its `$schema` names
    (Draft 2020-12 when it names none, as MCP specifies)."""

    def __init__(self, tool_name: str, schema: dict[str, Any]) -> None:
        # jsonschema is a dependency of the mcp SDK, so it is present wherever MCP tools are.
        from jsonschema import Draft202012Validator, validators
        from jsonschema.exceptions import SchemaError

        cls = validators.validator_for(schema, default=Draft202012Validator)
        try:
            cls.check_schema(schema)
        except SchemaError as exc:
            raise ValueError(f"tool {tool_name!r} has an invalid inputSchema: {exc.message}") from None
        self.tool_name = tool_name
        self._validator = cls(schema)

    def check(self, arguments: dict[str, Any]) -> None:
        """Raise ToolArgumentError naming every problem, each at its path in the arguments."""
        errors = sorted(self._validator.iter_errors(arguments), key=lambda e: list(map(str, e.absolute_path)))
        if not errors:
            return
        problems = []
        for err in errors:
            where = ".".join(str(part) for part in err.absolute_path) or "(arguments)"
            problems.append(f"{where}: {err.message}")
        raise ToolArgumentError(f"invalid arguments for {self.tool_name!r}: " + "; ".join(problems))


def kind_from_annotations(annotations: Any) -> tuple[ToolKind, bool, bool]:
    """(kind, destructive, idempotent) from MCP ToolAnnotations (or None).

    readOnlyHint → READ; destructiveHint → WRITE (and destructive: approval by default); an explicit
    readOnlyHint false → WRITE (it changes the world, additively); no hints → GENERIC. A READ tool
    is never destructive, as the MCP spec says destructiveHint only means something for writers.
    """
    if annotations is None:
        return ToolKind.GENERIC, False, False
    read_only = getattr(annotations, "read_only_hint", None)
    destructive = getattr(annotations, "destructive_hint", None)
    idempotent = bool(getattr(annotations, "idempotent_hint", None))
    if read_only:
        return ToolKind.READ, False, idempotent
    if destructive:
        return ToolKind.WRITE, True, idempotent
    if read_only is False or destructive is False:
        return ToolKind.WRITE, False, idempotent
    return ToolKind.GENERIC, False, idempotent
