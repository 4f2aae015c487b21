"""The user message states both budgets: turns (of max_turns) and actions left."""

from __future__ import annotations

import pytest

from ragen.agent.prompts import user_message


def test_full_user_message():
    text = user_message(1, "P_G\n", 8, 5, previous_reward=-0.1, max_turns=5)
    assert text == (
        "Turn 2 of 5:\n"
        "Reward of your last turn: -0.1\n"
        "State:\n"
        "P_G\n"
        "You have 8 actions left (at most 5 this turn).\n"
        "Reply as <think>...</think><answer>...</answer> with nothing else."
    )


def test_compact_user_message():
    text = user_message(1, "P_G", 8, 5, previous_reward=-0.1, max_turns=5, style="compact")
    assert text == "Turn 2/5, 8 actions left, last reward -0.1:\nP_G"
    assert user_message(0, "P_G", 10, 5, max_turns=1, style="compact").startswith("Turn 1/1, ")


def test_max_turns_is_required_and_checked():
    with pytest.raises(TypeError, match="max_turns"):
        user_message(0, "P_G", 8, 5)  # the turn budget must be shown
    with pytest.raises(ValueError, match="max_turns=5"):
        user_message(5, "P_G", 8, 5, max_turns=5)
