"""ReIn's error → recovery map: error types, their categories, recovery tools and plan texts.

The map is data (interventions/data/error_map.yaml). Users extend it with their own error types
(a description, a recovery tool, optionally their own plan) and pass the file to ReIn.
"""

from __future__ import annotations

import re
import string
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from agent.errors import UserFacingError

DEFAULT_MAP_PATH = Path(__file__).resolve().parent / "data" / "error_map.yaml"
"""The error map shipped with rein."""

NO_ERROR = "none"
"""The label for a dialogue with nothing wrong in it."""

PLAN_FIELDS = frozenset({"title", "description", "recovery_tool", "user_turn", "rationale"})
_NAME = re.compile(r"^[a-z][a-z0-9_]*$")
_QUOTE_LIMIT = 240


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Category(_Strict):
    """A family of errors sharing one recovery."""

    description: str
    """What the errors of this category have in common."""
    recovery_tool: str
    """Name of the tool the agent calls to recover (it must be declared to the agent)."""
    plan: str
    """The plan text, in the agent's own voice; placeholders: {title} {description} {recovery_tool} {user_turn} {rationale}."""
    recovery_tool_ref: str | None = None
    """"module:attribute" of the recovery Tool, when it is not one of rein's built-in tools."""


class ErrorType(_Strict):
    """One kind of user-induced error."""

    category: str
    """The category it belongs to (a key of ErrorMap.categories)."""
    title: str
    """Short human name, used in plans and reports."""
    description: str
    """What the error looks like; shown to the LLM detector and quoted in the plan."""
    recovery_tool: str | None = None
    """Overrides the category's recovery tool."""
    recovery_tool_ref: str | None = None
    """Overrides the category's recovery_tool_ref."""
    plan: str | None = None
    """Overrides the category's plan text."""


class Recovery(BaseModel):
    """What ReIn plants for one diagnosed error."""

    error_type: str
    """The diagnosed error type."""
    category: str
    """Its category."""
    recovery_tool: str
    """The tool the plan tells the agent to call."""
    plan: str
    """The plan text."""


class ErrorMap(_Strict):
    """Error types and categories, validated as a whole."""

    version: int = 1
    """Format version."""
    categories: dict[str, Category]
    """Category name → category."""
    error_types: dict[str, ErrorType] = Field(min_length=1)
    """Error type name → error type."""

    @model_validator(mode="after")
    def _check(self) -> ErrorMap:
        for name in [*self.categories, *self.error_types]:
            if not _NAME.match(name):
                raise ValueError(f"name {name!r} must be lower_snake_case (letters, digits, underscores)")
            if name == NO_ERROR:
                raise ValueError(f"{NO_ERROR!r} is reserved for 'no error' and cannot name an error type or category")
        for name, et in self.error_types.items():
            if et.category not in self.categories:
                known = ", ".join(self.categories) or "none"
                raise ValueError(f"error type {name!r}: unknown category {et.category!r} (known: {known})")
        for where, text in self._plans():
            _check_plan(where, text)
        return self

    def _plans(self) -> list[tuple[str, str]]:
        out = [(f"categories.{n}.plan", c.plan) for n, c in self.categories.items()]
        out += [(f"error_types.{n}.plan", e.plan) for n, e in self.error_types.items() if e.plan]
        return out

    @property
    def labels(self) -> list[str]:
        """Every error type name, in file order."""
        return list(self.error_types)

    def category_of(self, error_type: str) -> str:
        """The category of an error type."""
        return self._get(error_type).category

    def recovery_tool(self, error_type: str) -> str:
        """The recovery tool an error type calls for."""
        et = self._get(error_type)
        return et.recovery_tool or self.categories[et.category].recovery_tool

    def recovery_tool_ref(self, error_type: str) -> str | None:
        """The "module:attribute" of an error type's recovery tool, if it is not built in."""
        et = self._get(error_type)
        return et.recovery_tool_ref or self.categories[et.category].recovery_tool_ref

    def recovery_tools(self) -> dict[str, str | None]:
        """Every recovery tool name the map uses → its "module:attribute" ref (None for built-ins)."""
        out: dict[str, str | None] = {}
        for name in self.error_types:
            tool = self.recovery_tool(name)
            out[tool] = out.get(tool) or self.recovery_tool_ref(name)
        return out

    def recovery(self, error_type: str, user_turn: str = "", rationale: str = "") -> Recovery:
        """The recovery (tool and plan text) for a diagnosed error type."""
        et = self._get(error_type)
        tool = self.recovery_tool(error_type)
        template = et.plan or self.categories[et.category].plan
        quote = " ".join(user_turn.split())
        if len(quote) > _QUOTE_LIMIT:
            quote = quote[: _QUOTE_LIMIT - 1].rstrip() + "…"
        plan = template.format(
            title=et.title,
            description=" ".join(et.description.split()),
            recovery_tool=tool,
            user_turn=quote,
            rationale=" ".join(rationale.split()),
        )
        return Recovery(error_type=error_type, category=et.category, recovery_tool=tool, plan=" ".join(plan.split()))

    def merged(self, other: ErrorMap) -> ErrorMap:
        """A new map with other's categories and error types added (other wins on a name clash)."""
        return ErrorMap(
            version=max(self.version, other.version),
            categories={**self.categories, **other.categories},
            error_types={**self.error_types, **other.error_types},
        )

    def _get(self, error_type: str) -> ErrorType:
        try:
            return self.error_types[error_type]
        except KeyError:
            raise KeyError(f"unknown error type {error_type!r}; known: {', '.join(self.error_types)}") from None


def _check_plan(where: str, text: str) -> None:
    try:
        fields = {f for _, f, _, _ in string.Formatter().parse(text) if f is not None}
    except ValueError as exc:
        raise ValueError(f"{where}: malformed placeholder ({exc}); write literal braces as {{{{ and }}}}") from None
    unknown = sorted(f for f in fields if f not in PLAN_FIELDS)
    if unknown:
        raise ValueError(f"{where}: unknown placeholder(s) {unknown}; allowed: {sorted(PLAN_FIELDS)}")


def parse_error_map(data: Any, source: str = "error map") -> ErrorMap:
    """Validate a parsed error map; the error names the offending field."""
    if not isinstance(data, dict):
        raise UserFacingError(f"{source}: expected a mapping with 'categories' and 'error_types'")
    try:
        return ErrorMap.model_validate(data)
    except ValidationError as exc:
        err = exc.errors(include_url=False)[0]
        loc = ".".join(str(p) for p in err["loc"])
        msg = err["msg"].removeprefix("Value error, ")
        raise UserFacingError(f"{source}: {loc + ': ' if loc else ''}{msg}") from None


def load_error_map(path: str | Path | None = None) -> ErrorMap:
    """Read an error map from YAML or JSON; None gives the map shipped with rein."""
    import yaml

    file = Path(path) if path is not None else DEFAULT_MAP_PATH
    try:
        text = file.read_text(encoding="utf-8")
    except OSError as exc:
        raise UserFacingError(f"cannot read error map {file}: {exc.strerror or exc}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise UserFacingError(f"{file}: not valid YAML/JSON: {exc}") from None
    return parse_error_map(data, str(file))


def resolve_error_map(spec: ErrorMap | str | Path | dict[str, Any] | None) -> ErrorMap:
    """An ErrorMap from a map, a file path, a parsed dict, or None (the default map)."""
    if isinstance(spec, ErrorMap):
        return spec
    if isinstance(spec, dict):
        return parse_error_map(spec)
    return load_error_map(spec)


SEEN = ("vague_reference", "ambiguous_interpretation", "unsupported_operation", "unsupported_parameter")
"""Error types the paper's ReIn prompt was designed with."""
UNSEEN = ("contradiction", "unsupported_domain")
"""Error types held out from that design."""
