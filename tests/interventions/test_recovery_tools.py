"""Recovery tools declared to the agent: marked so that, once one has succeeded, the agent answers
the user next (tools.builtin.RESPOND_NEXT), the agent's own definitions included."""

from __future__ import annotations

from interventions.recovery_tools import with_recovery_tools
from tools.builtin import RESPOND_NEXT, report_internal_error, transfer_to_human_agents
from tools.tool import tool


@tool
def get_order_details(order_id: str) -> str:
    """Get an order.

    Args:
        order_id: The order id.
    """
    return order_id


def test_the_recovery_tools_are_marked_to_answer_the_user_next() -> None:
    assert report_internal_error.metadata[RESPOND_NEXT] and transfer_to_human_agents.metadata[RESPOND_NEXT]
    assert "ask them to clarify" in report_internal_error.fn(summary="x")

    @tool
    def transfer_to_human_agents_own(summary: str) -> str:
        """A domain's own transfer.

        Args:
            summary: The issue.
        """
        return "Transfer successful"

    own = transfer_to_human_agents_own.with_options(name="transfer_to_human_agents")
    kit = {t.name: t for t in with_recovery_tools([get_order_details, own])}
    assert kit["transfer_to_human_agents"].fn is own.fn  # the agent's own definition, marked
    assert kit["transfer_to_human_agents"].metadata[RESPOND_NEXT]
    assert not kit["get_order_details"].metadata.get(RESPOND_NEXT)
