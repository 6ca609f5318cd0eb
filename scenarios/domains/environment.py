"""DomainEnvironment: one episode's world for a tau2-style domain (DBs, tools, env functions).

Quick tour (what an orchestrator or evaluator needs):

    env = load_domain("retail")                 # fresh DB copy, bundled data
    env.policy                                  # the agent policy (markdown)
    toolkit = env.agent_toolkit()               # rein Toolkit; schemas are tau2's exactly
    env.call("get_order_details", order_id="#W2378156")        # raw call, raises ToolError
    env.call("dismiss_notification", "user", notification_id="notif_1")   # user side (mock)
    env.apply_initial_state(task.initial_state) # merge data, run init actions, replay history
    env.run_env_assertion(assertion)            # -> bool (result == assert_value)
    env.db_hash(), env.user_db_hash()           # canonical hashes (user: None without a user DB)
    env.dump(), env.user_dump()                 # canonical JSON dumps (private copies)

Tools on both paths (toolkit and `call`) act on this environment's own DB copy. The agent DB and
the user DB stay separate objects: unlike tau2's `set_state`, merging `agent_data` does not point
the user tools at the agent DB (see scenarios/domains/data/NOTICE.md).
"""

from __future__ import annotations

import functools
import inspect
import json
from collections.abc import Callable, Iterable, Mapping
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ValidationError

from scenarios.canonical import json_clone
from scenarios.domains.common import (
    TRANSFER_MESSAGE,
    argument_hints,
    calculate,
    call_error_guidance,
)
from scenarios.domains.data import ToolSpec, tool_specs
from scenarios.domains.store import Snapshot, TableStore
from scenarios.tau2_tasks import EnvAssertion, HistoryMessage, InitialState
from tools.errors import ToolError
from tools.registry import Toolkit
from tools.schema import model_from_signature
from tools.tool import Tool, ToolKind

Side = Literal["assistant", "user"]
_ROLE_ATTR = "__rein_domain_role__"


def domain_tool(side: Side = "assistant") -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Mark a method as a tool of the agent ("assistant") or user side; its spec comes from tools.json."""

    def mark(fn: Callable[..., Any]) -> Callable[..., Any]:
        setattr(fn, _ROLE_ATTR, ("tool", side))
        return fn

    return mark


def env_function(side: Side = "assistant") -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Mark a method as a non-tool env function (assertions, setup helpers) of one side."""

    def mark(fn: Callable[..., Any]) -> Callable[..., Any]:
        setattr(fn, _ROLE_ATTR, ("function", side))
        return fn

    return mark


class DomainStateError(ValueError):
    """An initial state or DB that does not fit the domain (bad merge data, replay mismatch)."""


class DomainEnvironment:
    """The DBs, tools and env functions of one domain for one episode.

    Subclasses set the class attributes and mark methods with @domain_tool / @env_function; a
    method's name is its tool name. Tool code reads records through `self.store.table(...)` and
    changes them only through `self.store.writable(table, key)` or `self.store.put(...)`, because
    unchanged records are shared with other episodes and with the cached canonical text.
    """

    name: ClassVar[str]
    """Domain name: mock, retail or airline."""
    db_model: ClassVar[type[BaseModel]]
    """Pydantic model of the whole agent DB."""
    tables: ClassVar[Mapping[str, type[BaseModel]]]
    """Agent DB table name → record model."""
    user_db_model: ClassVar[type[BaseModel] | None] = None
    """Pydantic model of the user DB, for domains that have one."""
    user_tables: ClassVar[Mapping[str, type[BaseModel]]] = {}
    """User DB table name → record model."""

    _members: ClassVar[dict[tuple[str, Side], dict[str, str]]]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        members: dict[tuple[str, Side], dict[str, str]] = {}
        for klass in reversed(cls.__mro__):
            for attr, value in vars(klass).items():
                role = getattr(value, _ROLE_ATTR, None)
                if role is not None:
                    members.setdefault(role, {})[attr] = attr
        cls._members = members

    def __init__(self, db: Snapshot, user_db: Snapshot | None = None, policy: str = "") -> None:
        self.store = TableStore(db)
        """Live agent DB."""
        self.user_store = TableStore(user_db) if user_db is not None else None
        """Live user DB, or None."""
        self.policy = policy
        """The agent policy text."""

    # ----- state -------------------------------------------------------------------------

    @property
    def db(self) -> dict[str, Any]:
        """Live agent DB, shaped like db.json; read-only (records may be shared with other episodes)."""
        return self.store.data

    @property
    def user_db(self) -> dict[str, Any] | None:
        """Live user DB, or None; read-only."""
        return self.user_store.data if self.user_store is not None else None

    def db_hash(self) -> str:
        """Canonical hash of the agent DB."""
        return self.store.canonical_hash()

    def user_db_hash(self) -> str | None:
        """Canonical hash of the user DB, or None when the domain has none."""
        return self.user_store.canonical_hash() if self.user_store is not None else None

    def dump(self) -> dict[str, Any]:
        """Canonical dump of the agent DB (a private copy)."""
        return self.store.dump()

    def user_dump(self) -> dict[str, Any] | None:
        """Canonical dump of the user DB, or None."""
        return self.user_store.dump() if self.user_store is not None else None

    # ----- tools -------------------------------------------------------------------------

    def tool_names(self, side: Side = "assistant") -> list[str]:
        """Names of one side's tools, in tools.json order."""
        return [spec.name for spec in self._specs(side)]

    def agent_toolkit(self) -> Toolkit:
        """The agent's tools, bound to this environment."""
        return self._toolkit("assistant")

    def user_toolkit(self) -> Toolkit:
        """The user's tools (empty for domains without any), bound to this environment."""
        return self._toolkit("user")

    def is_mutating(self, name: str, side: Side = "assistant") -> bool:
        """Whether a tool changes state (WRITE); such calls are re-executed when replaying history."""
        spec = next((s for s in self._specs(side) if s.name == name), None)
        return spec is not None and spec.kind is ToolKind.WRITE

    def call(self, name: str, requestor: Side = "assistant", /, **arguments: Any) -> Any:
        """Call a tool the way tau2's `make_tool_call` does: raw arguments, no schema coercion.

        Returns a private copy of the result; raises ToolError (with tau2's message where known).
        """
        if requestor not in ("assistant", "user"):
            raise ToolError(f"Invalid requestor: {requestor}")
        if requestor == "user" and not self._specs("user"):
            raise ToolError("User tools not available")
        method = self._members.get(("tool", requestor), {}).get(name)
        if method is None:
            raise ToolError(f"Tool '{name}' not found.")
        return self._invoke(method, arguments)

    def run_env_function(
        self, env_type: Side, func_name: str, arguments: Mapping[str, Any] | None = None
    ) -> Any:
        """Call a tool or non-tool env function of one side by name (initialization actions, assertions)."""
        method = self._members.get(("tool", env_type), {}).get(func_name) or self._members.get(
            ("function", env_type), {}
        ).get(func_name)
        if method is None:
            raise ToolError(f"Function {func_name} not found in {env_type} tools")
        return self._invoke(method, dict(arguments or {}))

    def run_env_assertion(self, assertion: EnvAssertion | Mapping[str, Any]) -> bool:
        """Run an assertion function; True when its boolean result equals assert_value."""
        a = (
            assertion
            if isinstance(assertion, EnvAssertion)
            else EnvAssertion.model_validate(assertion)
        )
        result = self.run_env_function(a.env_type, a.func_name, a.arguments)
        if not isinstance(result, bool):
            raise ToolError(
                f"Function {a.func_name} returned {type(result).__name__} instead of bool"
            )
        return result == a.assert_value

    # ----- initial state -----------------------------------------------------------------

    def apply_initial_state(
        self, initial_state: InitialState | Mapping[str, Any] | None, strict: bool = True
    ) -> None:
        """Set up a task's starting state, in tau2's order.

        1. Deep-merge initialization_data (nested objects merge, lists and scalars replace);
           every touched record is re-validated and canonicalised.
        2. Run initialization_actions (tools or env functions, by side).
        3. Replay the WRITE tool calls of message_history; with strict, a replayed call whose
           output differs from the recorded tool message raises DomainStateError.
        """
        if initial_state is None:
            return
        state = (
            initial_state
            if isinstance(initial_state, InitialState)
            else InitialState.model_validate(initial_state)
        )
        data = state.initialization_data
        if data is not None and data.agent_data is not None:
            _merge(self.store, data.agent_data, self.tables, "agent_data")
        if data is not None and data.user_data is not None:
            if self.user_store is None:
                raise DomainStateError(
                    f"the {self.name} domain has no user DB to merge user_data into"
                )
            _merge(self.user_store, data.user_data, self.user_tables, "user_data")
        for action in state.initialization_actions or []:
            self.run_env_function(action.env_type, action.func_name, action.arguments)
        self.replay_history(state.message_history or [], strict=strict)

    def replay_history(
        self, messages: Iterable[HistoryMessage | Mapping[str, Any]], strict: bool = True
    ) -> None:
        """Re-execute the state-changing tool calls of a recorded conversation."""
        for call, answer, side in _paired_calls(messages):
            if call.name not in self.tool_names(side) or not self.is_mutating(call.name, side):
                continue
            try:
                text = _message_text(self.call(call.name, side, **call.arguments))
            except Exception as exc:  # tau2 records any failure as an error tool message
                text = f"Error: {exc}"
            if strict and _parse_content(text) != _parse_content(answer.content or ""):
                raise DomainStateError(
                    f"replaying {call.name}({json.dumps(call.arguments, ensure_ascii=False)}) returned "
                    f"{text!r}, but the history records {answer.content!r}"
                )

    # ----- internals ---------------------------------------------------------------------

    def _specs(self, side: Side) -> list[ToolSpec]:
        specs = tool_specs(self.name)
        return specs.agent_tools if side == "assistant" else specs.user_tools

    def _invoke(self, method: str, arguments: dict[str, Any]) -> Any:
        fn = getattr(self, method)
        try:
            _signature(getattr(type(self), method)).bind(self, **arguments)
        except TypeError as exc:
            raise ToolError(f"invalid arguments for {method}: {exc}") from None
        return json_clone(fn(**arguments))

    def _toolkit(self, side: Side) -> Toolkit:
        tools = []
        implemented = self._members.get(("tool", side), {})
        specs = self._specs(side)
        for spec in specs:
            method = implemented.get(spec.name)
            if method is None:
                raise RuntimeError(
                    f"{self.name}: tools.json lists {spec.name!r} but it is not implemented"
                )
            tools.append(
                Tool(
                    name=spec.name,
                    description=spec.description,
                    parameters=json_clone(spec.parameters),
                    fn=_returning_copies(
                        getattr(self, method),
                        call_error_guidance(spec.name, spec.kind, _reads_sharing_arguments(spec, specs))
                        if side == "assistant" else "",
                        spec.name,
                        spec.parameters,
                    ),
                    kind=spec.kind,
                    args_model=_args_model(getattr(type(self), method), method),
                    metadata={"domain": self.name, "side": side, "environment": self},
                )
            )
        return Toolkit(tools, name=self.name if side == "assistant" else f"{self.name}-user")


def _returning_copies(fn: Callable[..., Any], guidance: str = "", tool: str = "",
                      parameters: dict[str, Any] | None = None) -> Callable[..., Any]:
    """fn returning private copies; its ToolError messages get `guidance` appended (the agent's
    toolkit: see common.call_error_guidance), after any hint about the call's own arguments
    (common.argument_hints). `call` keeps tau2's bare messages."""

    @functools.wraps(fn)
    def call(**arguments: Any) -> Any:
        try:
            return json_clone(fn(**arguments))
        except ToolError as exc:
            if not guidance:
                raise
            # A certain correction replaces the general advice, which offers to ask the user instead.
            hints = argument_hints(tool, parameters or {}, arguments)
            raise ToolError("\n".join([str(exc), *(hints or [guidance])])) from None

    return call


def _reads_sharing_arguments(spec: ToolSpec, specs: list[ToolSpec]) -> list[str]:
    """The READ tools that take one of spec's arguments (get_order_details for cancel_pending_order)."""
    names = set(spec.parameters.get("properties") or {})
    return [
        s.name for s in specs
        if s.kind is ToolKind.READ and s.name != spec.name and names & set(s.parameters.get("properties") or {})
    ]


# Keyed by the class's function (not the class: mypy takes a class for unhashable).
@functools.cache
def _signature(fn: Callable[..., Any]) -> inspect.Signature:
    return inspect.signature(fn)


@functools.cache
def _args_model(fn: Callable[..., Any], method: str) -> type[BaseModel]:
    return model_from_signature(fn, method, {})


def validate_record(
    model: type[BaseModel], record: Any, where: str, error: type[Exception] = DomainStateError
) -> Any:
    """Validate one record and return its canonical dump; the error names the field."""
    try:
        return model.model_validate(record).model_dump(mode="json")
    except ValidationError as exc:
        err = exc.errors(include_url=False)[0]
        loc = ".".join(str(p) for p in err["loc"])
        raise error(f"{where}{'.' + loc if loc else ''}: {err['msg']}") from None


def _merge(
    store: TableStore, update: Mapping[str, Any], tables: Mapping[str, type[BaseModel]], label: str
) -> None:
    for table, value in update.items():
        if table not in tables:
            raise DomainStateError(f"{label}: unknown table {table!r}; tables: {', '.join(tables)}")
        if not isinstance(value, dict):
            raise DomainStateError(
                f"{label}.{table}: expected an object of records, got {type(value).__name__}"
            )
        records = store.table(table)
        for key, patch in value.items():
            current = records.get(key)
            if isinstance(current, dict) and isinstance(patch, dict):
                merged = store.writable(table, key)
                _deep_update(merged, patch)
            else:
                merged = json_clone(patch)
            store.put(table, key, validate_record(tables[table], merged, f"{label}.{table}.{key}"))


def _deep_update(target: dict[str, Any], patch: Mapping[str, Any]) -> None:
    for key, value in patch.items():
        if isinstance(target.get(key), dict) and isinstance(value, dict):
            _deep_update(target[key], value)
        else:
            target[key] = json_clone(value)


def _paired_calls(
    messages: Iterable[HistoryMessage | Mapping[str, Any]],
) -> list[tuple[Any, HistoryMessage, Side]]:
    """(tool call, tool message, side) for every tool call, checking that each is answered in order."""
    queue = [
        m if isinstance(m, HistoryMessage) else HistoryMessage.model_validate(m) for m in messages
    ]
    pairs = []
    i = 0
    while i < len(queue):
        message = queue[i]
        i += 1
        if message.role == "tool":
            raise DomainStateError(
                f"message_history[{i - 1}]: tool message without a preceding tool call"
            )
        for call in message.tool_calls or []:
            if i >= len(queue) or queue[i].role != "tool":
                raise DomainStateError(
                    f"message_history[{i}]: expected the tool message answering {call.id!r}"
                )
            answer = queue[i]
            if answer.id != call.id:
                raise DomainStateError(
                    f"message_history[{i}]: tool message id {answer.id!r} does not match call {call.id!r}"
                )
            i += 1
            side: Side = call.requestor or ("user" if message.role == "user" else "assistant")
            pairs.append((call, answer, side))
    return pairs


def _message_text(result: Any) -> str:
    """A tool result as tau2 writes it into a tool message."""
    if isinstance(result, str):
        return result
    if isinstance(result, bool | int | float):
        return json.dumps(str(result))
    return json.dumps(result)


def _parse_content(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


class GenericTools:
    """The GENERIC tools retail and airline share: calculate and transfer_to_human_agents."""

    @domain_tool()
    def calculate(self, expression: str) -> str:
        """Evaluate an arithmetic expression, rounded to 2 decimals."""
        return calculate(expression)

    @domain_tool()
    def transfer_to_human_agents(self, summary: str) -> str:
        """Transfer the user to a human agent."""
        return TRANSFER_MESSAGE
