"""Strict response parser: the rules of ragen.agent.reasoning.parse_response, plus a fuzz of random strings."""

from __future__ import annotations

import random

import pytest

from ragen.agent.reasoning import format_response, parse_response, split_actions


@pytest.mark.parametrize(
    "text, thought, actions",
    [
        ("<think>go left</think><answer>Left || Up</answer>", "go left", ["Left", "Up"]),
        ("  \n<think> a </think>\n\n<answer> Up </answer>\n ", "a", ["Up"]),
        ("<think></think><answer>Up||||  ||Down</answer>", "", ["Up", "Down"]),
        ("<think>x</think><answer>(1 + 2) * 3</answer>", "x", ["(1 + 2) * 3"]),
    ],
)
def test_well_formed_responses(text, thought, actions):
    parsed = parse_response(text)
    assert parsed.format_ok and parsed.error == ""
    assert parsed.thought == thought
    assert parsed.actions == actions


@pytest.mark.parametrize(
    "text, error",
    [
        ("", "empty response"),
        ("   \n", "empty response"),
        ("Up", "missing <think>"),
        ("<answer>Up</answer>", "missing <think>"),
        ("<think>x</think>", "missing <answer>"),
        ("<think>x</think><answer>Up", "missing </answer>"),
        ("<think>a</think><think>b</think><answer>Up</answer>", "<think> appears 2 times"),
        ("<think>x</think><answer>Up</answer><answer>Down</answer>", "<answer> appears 2 times"),
        ("<answer>Up</answer><think>x</think>", "tags out of order or nested"),
        ("<think>x<answer>Up</think></answer>", "tags out of order or nested"),
        ("<think><answer>Up</answer></think>", "tags out of order or nested"),
        ("sure! <think>x</think><answer>Up</answer>", "text outside the tags"),
        ("<think>x</think> so <answer>Up</answer>", "text outside the tags"),
        ("<think>x</think><answer>Up</answer> done", "text outside the tags"),
        ("<think>x</think><answer> || </answer>", "empty answer"),
        ("<THINK>x</THINK><answer>Up</answer>", "missing <think>"),
    ],
)
def test_malformed_responses_execute_nothing(text, error):
    parsed = parse_response(text)
    assert not parsed.format_ok
    assert parsed.actions == []
    assert parsed.error == error


def test_malformed_keeps_best_effort_thought():
    parsed = parse_response("<think>I go up</think> Up")
    assert not parsed.format_ok and parsed.thought == "I go up"


def test_no_think_mode():
    assert parse_response("<answer>Up</answer>", think=False).actions == ["Up"]
    bad = parse_response("<think>x</think><answer>Up</answer>", think=False)
    assert not bad.format_ok and bad.error == "unexpected <think> (think=False)"


def test_custom_separator_and_validation():
    assert parse_response("<answer>a ; b;c</answer>", think=False, separator=";").actions == [
        "a",
        "b",
        "c",
    ]
    assert split_actions("a||b") == ["a", "b"]
    with pytest.raises(ValueError, match="separator"):
        split_actions("a", "")
    with pytest.raises(TypeError, match="str"):
        parse_response(None)  # type: ignore[arg-type]


def test_format_response_roundtrip():
    for think in (True, False):
        text = format_response(["Up", "Left"], "plan", think=think, separator="||")
        parsed = parse_response(text, think=think)
        assert parsed.format_ok and parsed.actions == ["Up", "Left"]


_PIECES = [
    "<think>", "</think>", "<answer>", "</answer>", "||", "|", " ", "\n", "\t", "Up", "left",
    "<", ">", "/", "think", "answer", "ü", "🙂", "\x00", "\u202e", "😀😀", "中文", "",
    "<think >", "</ answer>", "&lt;", "\r\n", "1 + 2", "||||",
]  # fmt: skip


def _junk(rng: random.Random) -> str:
    n = rng.randint(0, 12)
    return "".join(rng.choice(_PIECES) for _ in range(n))


def test_fuzz_parser_never_raises_and_is_consistent():
    rng = random.Random(0)
    n_ok = 0
    for _ in range(5000):
        text = _junk(rng)
        for think in (True, False):
            parsed = parse_response(text, think=think)
            if parsed.format_ok:
                n_ok += 1
                assert parsed.actions and parsed.error == ""
                for a in parsed.actions:
                    assert a == a.strip() and a and "||" not in a
                    assert "<answer>" not in a and "</answer>" not in a
                # the canonical re-rendering parses to the same actions
                again = parse_response(
                    format_response(parsed.actions, parsed.thought, think), think
                )
                assert again.actions == parsed.actions
            else:
                assert parsed.actions == [] and parsed.error
    assert n_ok > 0  # the generator does produce some valid responses


def test_fuzz_random_unicode():
    rng = random.Random(1)
    for _ in range(2000):
        text = "".join(chr(rng.randint(0, 0x2FFFF)) for _ in range(rng.randint(0, 40)))
        text = text.replace("\ud800", "")
        parsed = parse_response(text)
        assert not parsed.format_ok or parsed.actions
