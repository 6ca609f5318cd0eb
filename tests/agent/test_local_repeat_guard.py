"""The embedded model's guard against re-calling a tool whose result it already has."""

from __future__ import annotations

from agent.messages import Message, ModelRequest, ModelResponse, ToolCall
from agent.models.local import repeats_answered_calls


def _request(*, error: bool = False, new_turn: bool = False) -> ModelRequest:
    call = ToolCall(id="c1", name="get_weather", arguments='{"city": "Paris"}')
    msgs = [
        Message.user("weather in Paris?"),
        Message.assistant("", [call]),
        Message.tool("c1", "get_weather", "sunny", is_error=error),
    ]
    if new_turn:
        msgs.append(Message.user("and again?"))
    return ModelRequest(messages=msgs)


def _response(arguments: str) -> ModelResponse:
    return ModelResponse(tool_calls=[ToolCall(name="get_weather", arguments=arguments)])


def test_verbatim_repeat_of_an_answered_call_is_detected() -> None:
    # key order and spacing do not matter: the arguments are compared as JSON
    assert repeats_answered_calls(_request(), _response('{ "city":"Paris" }'))


def test_new_arguments_a_failed_call_and_new_turns_are_not_repeats() -> None:
    assert not repeats_answered_calls(_request(), _response('{"city": "Oslo"}'))
    assert not repeats_answered_calls(_request(error=True), _response('{"city": "Paris"}'))
    assert not repeats_answered_calls(_request(new_turn=True), _response('{"city": "Paris"}'))


def test_a_call_refused_twice_in_the_turn_is_a_repeat() -> None:
    # One retry of a refused call is allowed (a passing failure); a third identical try, which
    # would end the turn with too_many_errors, is replaced by an answer.
    once = _request(error=True)
    call2 = ToolCall(id="c2", name="get_weather", arguments='{"city":"Paris"}')
    twice = ModelRequest(messages=[*once.messages, Message.assistant("", [call2]), Message.tool("c2", "get_weather", "no", is_error=True)])
    assert not repeats_answered_calls(once, _response('{"city": "Paris"}'))
    assert repeats_answered_calls(twice, _response('{"city": "Paris"}'))
    assert not repeats_answered_calls(twice, _response('{"city": "Oslo"}'))
