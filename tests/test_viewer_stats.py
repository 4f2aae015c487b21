"""ragen.viewer.reasoning_stats: the thought statistics of the viewer's reasoning section."""

import random

import pytest

from ragen.agent.reasoning import committed_actions, is_consistent
from ragen.viewer.reasoning_stats import (
    ACTION_MASK,
    distinct_n,
    is_mismatch,
    mask_actions,
    mean_words,
    mismatches,
    sample_thoughts,
    step_stats,
    top_thought_share,
)

ACTIONS = ["up", "down", "left", "right"]


def test_mask_actions_masks_whole_action_words_only():
    assert mask_actions("Go  LEFT, then up; upward is not up-ish", ACTIONS) == (
        f"go {ACTION_MASK}, then {ACTION_MASK}; upward is not {ACTION_MASK}-ish"
    )
    assert mask_actions("push the box", None) == "push the box"


def test_top_thought_share_counts_templates_not_actions():
    thoughts = ["I go up.", "I go left.", "I go Right.", "The box is stuck.", ""]
    assert top_thought_share(thoughts, ACTIONS) == pytest.approx(3 / 4)
    assert top_thought_share(thoughts, None) == pytest.approx(1 / 4)
    assert top_thought_share([], ACTIONS) == 0.0


def test_distinct_2_and_mean_words():
    assert distinct_n(["a b a b"], 2) == pytest.approx(2 / 3)  # (a b), (b a), (a b)
    assert distinct_n(["a b", "c d"], 2) == 1.0
    assert distinct_n(["single"], 2) == 0.0
    assert mean_words(["one two", "three", "  "]) == pytest.approx(1.5)


def test_is_mismatch_is_the_negation_of_is_consistent_where_judged():
    rng = random.Random(0)
    words = [*ACTIONS, "box", "wall", "so", "not"]
    for _ in range(500):
        thought = " ".join(rng.choice(words) for _ in range(rng.randint(0, 6)))
        answer = [rng.choice(ACTIONS) for _ in range(rng.randint(0, 2))]
        verdict = is_mismatch(thought, answer, ACTIONS)
        if not answer or not committed_actions(thought, ACTIONS):
            assert verdict is None
        else:
            assert verdict == (not is_consistent(thought, answer, ACTIONS))


def _ep(*turns):
    return {"turns": [{"thought": t, "actions": a, "format_ok": ok} for t, a, ok in turns]}


def test_step_stats_over_episodes():
    episodes = [
        _ep(("The best move is up.", ["up"], True), ("Left is a wall, so right.", ["left"], True)),
        _ep(("The best move is down.", ["down"], True), ("no action named", ["up"], True)),
        _ep(("garbage up", [], False)),
    ]
    stats = step_stats(episodes, ACTIONS)
    assert stats["thoughts"] == 5
    assert stats["top_thought_share"] == pytest.approx(2 / 5)
    # judged: the first three turns (the fourth names no action; the fifth is malformed)
    assert stats["mismatch_rate"] == pytest.approx(1 / 3)
    assert mismatches(episodes, ACTIONS) == [[False, True], [False, None], [None]]
    assert stats["thought_words"] == pytest.approx((5 + 6 + 5 + 3 + 2) / 5)
    assert sample_thoughts(episodes, 2) == ["The best move is up.", "Left is a wall, so right."]
