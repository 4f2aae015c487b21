"""Rule-checked reasoning rewards (ragen.agent.reasoning_rewards) on hand-built facts."""

from __future__ import annotations

import pytest

from ragen.agent.reasoning import REASONING_FORMATS, format_reply, parse_reply, parse_response
from ragen.agent.reasoning_rewards import (
    REASONING_REWARDS,
    ReasoningScores,
    applicable_rewards,
    check_reward_weights,
    fact_score,
    score_turn,
)
from ragen.envs.facts import Fact

MOVES = ["up", "down", "left", "right"]
KINDS = ("player", "box", "target")
MOVING = ("player", "box")
TRUTH = [Fact("player", 2, 3), Fact("box", 2, 2), Fact("target", 2, 1)]
AFTER = [Fact("player", 2, 2), Fact("box", 2, 1)]


def _score(fmt, *, observation="x", plan="push left", prediction="x", actions=("left",),
           thought="", true_facts=TRUTH, predicted_truth=AFTER, action_names=MOVES,
           fact_kinds=KINDS):  # fmt: skip
    text = format_reply(list(actions), fmt, thought=thought, observation=observation,
                        plan=plan, prediction=prediction)  # fmt: skip
    parsed = parse_reply(text, fmt)
    assert parsed.format_ok, parsed.error
    return score_turn(
        parsed,
        fmt,
        true_facts=true_facts,
        predicted_truth=predicted_truth,
        fact_kinds=fact_kinds,
        prediction_kinds=MOVING,
        action_names=action_names,
    )


@pytest.mark.parametrize(
    "observation, score",
    [
        ("player (2,3); box (2,2); target (2,1)", 1.0),  # full
        ("target (2,1); PLAYER ( 2 , 3 ); box (2,2);", 1.0),  # any order, case, spacing
        ("player (2,3)", 1 / 3),  # partial: omissions are charged
        ("player (2,3); box (2,2)", 2 / 3),
        ("player (2,3); box (2,2); target (2,1); box (5,5)", 3 / 4),  # one extra, false
        ("player (2,3); box (2,2); target (2,1); target (2,1)", 3 / 4),  # repeated
        ("player (2,3); player (2,3); player (2,3)", 1 / 3),  # padding does not pay
        ("player (9,9); box (9,9); target (9,9)", 0.0),  # all wrong
        ("player (2,3); box at 2,2", 0.0),  # unreadable piece: whole statement fails
        ("player (2,3); wall (0,0)", 0.0),  # unknown kind
        ("the player is at row 2", 0.0),  # prose
    ],
)
def test_grounding(observation, score):
    s = _score("grounding", observation=observation)
    assert s.grounding == pytest.approx(score)
    assert s.world_model is None and s.consistency == 1.0


def test_grounding_empty_statement_vs_empty_truth():
    # an empty statement cannot be sent (the section must be non-empty), but ";" parses
    # to no facts: it matches an empty truth and nothing else
    assert _score("grounding", observation=";", true_facts=[]).grounding == 1.0
    assert _score("grounding", observation=";").grounding == 0.0
    assert _score("grounding", observation="player (2,3)", true_facts=[]).grounding == 0.0
    assert fact_score("", KINDS, []) == 1.0 and fact_score("", KINDS, TRUTH) == 0.0


@pytest.mark.parametrize(
    "prediction, score",
    [
        ("player (2,2); box (2,1)", 1.0),
        ("box (2,1); player (2,2)", 1.0),
        ("player (2,2)", 0.5),
        ("player (2,3); box (2,2)", 0.0),  # the current state, not the next one
        ("player (2,2); box (2,1); target (2,1)", 0.0),  # target is not a prediction kind
        ("player (2,2); box (2,1); box (2,1)", 2 / 3),
    ],
)
def test_world_model(prediction, score):
    s = _score("world_modeling", prediction=prediction)
    assert s.world_model == pytest.approx(score)
    assert s.grounding is None


def test_grounding_world_modeling_scores_both():
    s = _score(
        "grounding_world_modeling",
        observation="player (2,3); box (2,2)",
        prediction="player (2,2); box (2,1)",
        plan="Pushing the box left is best: left.",
    )
    assert s == ReasoningScores(grounding=pytest.approx(2 / 3), world_model=1.0, consistency=1.0)


@pytest.mark.parametrize(
    "fmt, kw, consistency",
    [
        ("free_think", {"thought": "Up is a wall, so left."}, 1.0),
        ("free_think", {"thought": "Left first? No: up."}, 0.0),
        ("free_think", {"thought": "I have no idea."}, 0.0),
        ("free_think", {"thought": ""}, 0.0),
        ("grounding", {"plan": "then up then left", "actions": ("up", "left")}, 1.0),
        ("grounding", {"plan": "left then up", "actions": ("up", "left")}, 0.0),
        # structured formats read only the <reasoning> section: an action named in the
        # observation or prediction does not commit
        ("world_modeling", {"plan": "push the box", "prediction": "player (2,2); box (2,1)"}, 0.0),
    ],
)
def test_consistency(fmt, kw, consistency):
    assert _score(fmt, **kw).consistency == consistency


def test_malformed_reply_scores_zero_on_every_applicable_reward():
    for fmt in REASONING_FORMATS:
        parsed = parse_reply("<think>left</think> left", fmt)
        assert not parsed.format_ok
        s = score_turn(parsed, fmt, fact_kinds=KINDS, prediction_kinds=MOVING,
                       action_names=MOVES)  # fmt: skip
        expected = applicable_rewards(fmt, KINDS, MOVES)
        assert s.as_dict() == {name: 0.0 for name in expected}
    # a structured reply whose outer format is fine but whose sections are not
    bad = parse_reply("<think><reasoning>left</reasoning></think><answer>left</answer>",
                      "grounding_world_modeling")  # fmt: skip
    s = score_turn(bad, "grounding_world_modeling", true_facts=TRUTH, predicted_truth=AFTER,
                   fact_kinds=KINDS, prediction_kinds=MOVING, action_names=MOVES)  # fmt: skip
    assert s == ReasoningScores(grounding=0.0, world_model=0.0, consistency=0.0)


def test_applicability_matrix():
    table = {
        # fmt: (fact_kinds and actions, no fact_kinds, free-form actions, neither)
        "no_think": ((), (), (), ()),
        "free_think": (("consistency",), ("consistency",), (), ()),
        "grounding": (("grounding", "consistency"), ("consistency",), ("grounding",), ()),
        "world_modeling": (("world_model", "consistency"), ("consistency",), ("world_model",), ()),
        "grounding_world_modeling": (
            ("grounding", "world_model", "consistency"),
            ("consistency",),
            ("grounding", "world_model"),
            (),
        ),
    }
    for fmt, want in table.items():
        got = (
            applicable_rewards(fmt, KINDS, MOVES),
            applicable_rewards(fmt, (), MOVES),
            applicable_rewards(fmt, KINDS, None),
            applicable_rewards(fmt, (), []),
        )
        assert got == want, fmt
    with pytest.raises(ValueError, match="unknown reasoning format"):
        applicable_rewards("cot", KINDS, MOVES)


def test_not_applicable_rewards_are_none_and_facts_not_needed():
    s = _score("free_think", thought="go left", true_facts=None, predicted_truth=None)
    assert s == ReasoningScores(consistency=1.0) and s.as_dict() == {"consistency": 1.0}
    s = _score("grounding", observation="player (2,3)", action_names=None)
    assert s.consistency is None and s.as_dict() == {"grounding": pytest.approx(1 / 3)}
    none = score_turn(parse_reply("<answer>up</answer>", "no_think"), "no_think",
                      fact_kinds=KINDS, action_names=MOVES)  # fmt: skip
    assert none == ReasoningScores() and none.as_dict() == {} and none.total({}) == 0.0


def test_missing_truth_or_wrong_parser_raises():
    with pytest.raises(ValueError, match="needs true_facts"):
        _score("grounding", true_facts=None)
    with pytest.raises(ValueError, match="needs predicted_truth"):
        _score("world_modeling", predicted_truth=None)
    old = parse_response("<think><observation>x</observation><reasoning>left</reasoning>"
                         "</think><answer>left</answer>")  # fmt: skip
    with pytest.raises(ValueError, match="parse_reply"):
        score_turn(old, "grounding", true_facts=TRUTH, fact_kinds=KINDS, action_names=MOVES)


def test_total_and_weights():
    s = ReasoningScores(grounding=0.5, world_model=None, consistency=1.0)
    assert REASONING_REWARDS == ("grounding", "world_model", "consistency")
    assert s.as_dict() == {"grounding": 0.5, "consistency": 1.0}
    assert s.total({"grounding": 0.2, "world_model": 10.0, "consistency": 0.1}) == pytest.approx(
        0.2 * 0.5 + 0.1
    )
    assert s.total({"grounding": 1.0}) == 0.5  # missing weights count 0
    assert s.total({}) == 0.0
    assert s.total({"consistency": -0.5}) == -0.5
    with pytest.raises(ValueError, match="unknown reasoning reward 'format'"):
        s.total({"format": 1.0})
    with pytest.raises(ValueError, match="finite"):
        check_reward_weights({"grounding": float("nan")})
    assert check_reward_weights({"grounding": 1}) == {"grounding": 1.0}
