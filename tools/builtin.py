"""Built-in tools: think, calculate, and the recovery tools ReIn plans point to."""

from __future__ import annotations

import ast
import json
import operator
from typing import Any

from tools.errors import ToolError
from tools.registry import Toolkit, toolkit_factory
from tools.tool import Tool, ToolKind, tool

THINK_TOOL_NAME = "think"
RESPOND_NEXT = "respond_next"
"""Tool.metadata key: once a call of the tool succeeds, the agent's next step in that user turn
answers the user and calls no tool (the recovery tools: what is left is telling the user)."""
USER_ERRORS_ONLY = "user_errors_only"
"""Tool.metadata key: the tool reports an error in the user's request (the recovery tools). Once
one of the agent's own calls of another tool is refused in a user turn, the tool may not be called
for the rest of that turn, unless an intervention planted reasoning in it: a refused call is the
agent's error to correct (or to ask the user about), not the user's to report."""
PLAN_ONLY = "plan_only"
"""Tool.metadata key: the tool is offered to the model only in a user turn where an intervention
planted a plan (ReIn declares its recovery tools this way by default). Small models call a recovery
tool that is always on offer after ordinary requests too; offered with the plan, it is there
exactly when the turn was diagnosed as needing it."""


@tool(name=THINK_TOOL_NAME, kind=ToolKind.THINK, timeout_s=None)
def think(thought: str) -> str:
    """Use the tool to think about something. It will not obtain new information or change the
    database, but just append the thought to the log. Use it when complex reasoning is needed.

    Args:
        thought: A thought to think about.
    """
    return ""


_BINOPS: dict[type[ast.operator], Any] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_UNARY: dict[type[ast.unaryop], Any] = {ast.UAdd: operator.pos, ast.USub: operator.neg}


def evaluate_arithmetic(expression: str) -> float:
    """Evaluate + - * / // % ** and parentheses over numbers; nothing else is accepted."""
    try:
        tree = ast.parse(expression, mode="eval")
    except SyntaxError as exc:
        raise ToolError(f"not an arithmetic expression: {exc.msg}") from None

    def ev(node: ast.AST) -> float:
        if isinstance(node, ast.Expression):
            return ev(node.body)
        if isinstance(node, ast.Constant) and isinstance(node.value, int | float) and not isinstance(node.value, bool):
            return node.value
        if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
            left, right = ev(node.left), ev(node.right)
            if isinstance(node.op, ast.Pow) and abs(right) > 100:
                raise ToolError("exponent too large")
            try:
                return _BINOPS[type(node.op)](left, right)
            except ZeroDivisionError:
                raise ToolError("division by zero") from None
        if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
            return _UNARY[type(node.op)](ev(node.operand))
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitXor):
            # Calculators write powers with ^; say so instead of naming an AST node.
            raise ToolError("'^' is not a power here: write powers with ** (for example 2 ** 10)")
        part = ast.get_source_segment(expression, node) or type(node).__name__
        raise ToolError(f"not arithmetic: {part[:60]!r}; use numbers, + - * / // % ** and parentheses")

    return ev(tree)


@tool(kind=ToolKind.GENERIC)
def calculate(expression: str) -> str:
    """Calculate the result of a mathematical expression.

    Args:
        expression: The mathematical expression to calculate, such as '2 + 2'. The expression can contain numbers, operators (+, -, *, /), parentheses, and spaces.
    """
    try:
        return str(round(evaluate_arithmetic(expression), 2))
    except ToolError as exc:
        raise ToolError(f"{exc}{_corrected_call(expression)}") from None


def _corrected_call(expression: str) -> str:
    """The corrected call, for a '^' written as a power, when the corrected expression computes.

    Told only that '^' is not a power here, the 1.5B embedded model explained that to the user
    instead of calling again (4 of 12 big-number tasks while labelling routing tasks); a certain
    correction is given as the call to make."""
    if "^" not in expression:
        return ""
    fixed = expression.replace("^", "**")
    try:
        evaluate_arithmetic(fixed)
    except ToolError:
        return ""
    return f". Call calculate again now with {json.dumps({'expression': fixed})}."


@tool(kind=ToolKind.GENERIC)
def transfer_to_human_agents(summary: str) -> str:
    """Transfer the user to a human agent, with a summary of the user's issue. Only transfer if
    the user explicitly asks for a human agent, or the request cannot be handled within the
    scope of your actions.

    Args:
        summary: A summary of the user's issue.
    """
    return "Transfer successful"


@tool(kind=ToolKind.GENERIC)
def report_internal_error(summary: str) -> str:
    """Report that the user's request cannot be processed as stated (it is ambiguous or
    contradicts itself) so that it is logged and the user can be asked to clarify. Only for
    errors in the user's request: when one of your own tool calls fails, correct it or ask the user.

    Args:
        summary: What is unclear or contradictory in the user's request.
    """
    return "Internal error reported. Now reply to the user and ask them to clarify their request."


for _recovery in (transfer_to_human_agents, report_internal_error):
    _recovery.metadata[RESPOND_NEXT] = True
    _recovery.metadata[USER_ERRORS_ONLY] = True


@toolkit_factory
def builtin_toolkit() -> Toolkit:
    """think and calculate."""
    return Toolkit([think, calculate], name="builtin")


@toolkit_factory
def recovery_toolkit() -> Toolkit:
    """The recovery tools: report_internal_error and transfer_to_human_agents."""
    return Toolkit([report_internal_error, transfer_to_human_agents], name="recovery")


@toolkit_factory
def recovery_tools() -> list[Tool]:
    """The recovery tools as a list."""
    return list(recovery_toolkit())
