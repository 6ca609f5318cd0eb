"""The routing task graders: each kind with right and wrong answers."""

from __future__ import annotations

import pytest

from scenarios.routing_tasks import Grader, grade


@pytest.mark.parametrize(("answer", "ok"), [
    ("The answer is 2,125.", True),
    ("2125 dollars (from 25 x 85)", True),
    ("$2125.00", True),
    ("<reasoning>it is 2125</reasoning>The answer is 2120.", False),
    ("I think 2126", False),
    ("no idea", False),
])
def test_number_grader(answer: str, ok: bool) -> None:
    assert grade(Grader("number", "2125"), answer) is ok


@pytest.mark.parametrize(("answer", "ok"), [
    ("G. Stanley Hall", True),
    ("It was Stanley Hall.", True),
    ("g stanley hall", True),
    ("Hall", False),
    ("William James", False),
    ("Stanley Halloran", False),
    ("Maybe " + "William James, " * 20 + "or Stanley Hall", False),
])
def test_text_grader_with_aliases(answer: str, ok: bool) -> None:
    assert grade(Grader("text", "G. Stanley Hall", ("Stanley Hall",)), answer) is ok


@pytest.mark.parametrize(("answer", "ok"), [
    ("APPLE", True),
    ('"APPLE".', True),
    ("`APPLE`", True),
    ("apple", False),
    ("APPLE APPLE", False),
    ("Here it is: APPLE", False),
])
def test_exact_grader(answer: str, ok: bool) -> None:
    assert grade(Grader("exact", "APPLE"), answer) is ok


def test_exact_grader_keeps_expected_punctuation() -> None:
    assert grade(Grader("exact", "river!"), "river!")
    assert not grade(Grader("exact", "river!"), "river")


@pytest.mark.parametrize(("answer", "ok"), [
    ("Candle!", True),
    ("candle!", True),
    ("CANDLE!", True),
    ("Candle", False),
    ("Candles!", False),
    ("Candle! Enjoy.", False),
])
def test_exact_grader_ignoring_case(answer: str, ok: bool) -> None:
    assert grade(Grader("exact", "candle!", ignore_case=True), answer) is ok
    assert not grade(Grader("exact", "CANDLE"), "Candle")  # where case is the instruction, it counts


def test_only_the_tasks_not_about_case_ignore_it() -> None:
    from scenarios.routing_tasks import load_tasks

    formats = [t for t in load_tasks() if t.family == "format"]
    assert {t.grader.ignore_case for t in formats if "capital letters" in t.query} == {False}
    assert {t.grader.ignore_case for t in formats if "exclamation mark" in t.query} == {True}
    assert {t.grader.ignore_case for t in load_tasks() if t.family != "format"} == {False}


@pytest.mark.parametrize(("answer", "ok"), [
    ("Therefore, the number of small bags John can make is \\(\\boxed{90}\\) bags of 10 M&M.", True),
    ("<answer>90</answer> (from 900 M&M in bags of 10)", True),
    ("<final answer>The answer is 90.</final answer>", True),
    ("So it is \\boxed{89}. Check: 2 + 88 = 90", False),  # the marked answer is what counts
    ("<answer>35</answer> ... or maybe 90", False),
    ("<answer> </answer> 9 bags, so 90", True),  # an empty mark is no mark
])
def test_a_marked_final_answer_is_what_the_number_grader_reads(answer: str, ok: bool) -> None:
    assert grade(Grader("number", "90"), answer) is ok


def test_a_marked_final_answer_is_what_the_text_grader_reads() -> None:
    long = "Let me think about who could be the oldest. " * 10
    assert grade(Grader("text", "Cleo"), long + "<final answer>Cleo</final answer>")
    assert not grade(Grader("text", "Cleo"), "Cleo is older than Fay. <answer>Fay</answer>")


def test_unknown_grader_type_is_an_error() -> None:
    with pytest.raises(ValueError, match="unknown grader"):
        grade(Grader("regex", "x"), "x")  # type: ignore[arg-type]  # an unknown grader type, on purpose
