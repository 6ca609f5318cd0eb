"""The result contract of a turn and its resumes, and the once-per-message history validation."""

from __future__ import annotations

from agent import Agent, Message, ScriptedModel
from agent.ledger import CostLedger
from agent.models import call, reply
from agent.nodes.history import HistoryMemo
from tools import ToolKind, tool

DONE: list[str] = []


@tool(kind=ToolKind.WRITE, needs_approval=True)
def refund(order_id: str) -> str:
    """Refund an order.

    Args:
        order_id: Order id.
    """
    DONE.append(order_id)
    return f"refunded {order_id}"


async def test_a_turn_is_its_result_joined_with_its_resumes() -> None:
    DONE.clear()
    model = ScriptedModel([call("refund", order_id="#1"), call("refund", order_id="#2"), reply("Both refunded.")])
    agent = Agent(model, [refund], checkpointer="memory")
    sent = [Message.assistant("Hello, how can I help?"), Message.user("refund #1 and #2")]
    first = await agent.ainvoke(sent, "t")
    assert first.termination == "interrupted"
    assert first.appended_from == 2 and first.messages[:2] == sent
    assert [m.role for m in first.produced] == ["assistant"]
    second = await agent.aresume("t", True)
    third = await agent.aresume("t", True)
    assert third.output == "Both refunded." and DONE == ["#1", "#2"]
    # A resume holds only what it added: nothing of the paused run comes back.
    assert second.appended_from == 0 and second.produced == second.messages
    assert [m.role for m in second.messages] == ["tool", "assistant"]
    assert [m.role for m in third.messages] == ["tool", "assistant"]
    history = await agent.ahistory("t")
    assert history == first.messages + second.messages + third.messages
    joined = CostLedger(entries=[*first.ledger.entries, *second.ledger.entries, *third.ledger.entries])
    assert len(joined.entries) == 3 and [e.kind for e in second.ledger.entries] == ["model"]
    await agent.aclose()


def test_history_memo_validates_each_message_once_per_thread() -> None:
    memo = HistoryMemo(threads=1)
    raw = [Message.user("hi").model_dump(), Message.assistant("hello").model_dump()]
    first = memo.messages("a", raw)
    grown = memo.messages("a", [*raw, Message.user("again").model_dump()])
    assert grown[0] is first[0] and grown[1] is first[1] and grown[2].text == "again"
    # A turn restored from a checkpoint brings equal dicts, not the same ones: still known.
    restored = memo.messages("a", [dict(m) for m in raw])
    assert restored[0] is first[0]
    # A changed message (a rewound or edited thread) is validated again.
    edited = memo.messages("a", [raw[0], Message.assistant("changed").model_dump()])
    assert edited[0] is first[0] and edited[1].text == "changed"
    # Callers may extend what they get without changing what the memo holds.
    edited.append(Message.user("extra"))
    assert len(memo.messages("a", raw)) == 2
    # Only the most recent threads are kept.
    other = memo.messages("b", raw)
    assert memo.messages("a", raw)[0] is not first[0] and other[0] is not first[0]
    assert [m.text for m in memo.messages(None, raw)] == ["hi", "hello"]
