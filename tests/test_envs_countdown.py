"""Countdown: the safe arithmetic parser, puzzle generator + solver, rewards."""

from __future__ import annotations

import random
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ragen.envs import make
from ragen.envs.games.arithmetic import ExpressionError, evaluate
from ragen.envs.games.countdown import CountdownEnv, generate_puzzle, solve_countdown


@pytest.mark.parametrize(
    "text, value",
    [
        ("1 + 2 * 3", 7),
        ("(1 + 2) * 3", 9),
        ("8 - 3 - 2", 3),  # left-associative
        ("8 / 4 / 2", 1),
        ("2 * (3 + (4 - 1)) / 4", 3),
        ("7 / 2", Fraction(7, 2)),  # exact fractions, no float rounding
        ("10/3*3", 10),
        ("  12×3 ÷ 4 − 1 ", 8),
        ("3 * 8 = 24", 24),  # a trailing '= N' claim is allowed
        ("007 + 1", 8),
    ],
)
def test_parser_precedence_and_values(text, value):
    assert evaluate(text).value == value


def test_parser_records_numbers_and_division_by_zero():
    expr = evaluate("(25 - 5) * 3 / 4")
    assert expr.numbers == (25, 5, 3, 4) and expr.text == "(25 - 5) * 3 / 4"
    zero = evaluate("5 / (3 - 3)")
    assert zero.value is None and zero.divides_by_zero and zero.numbers == (5, 3, 3)


@pytest.mark.parametrize(
    "text",
    [
        "",
        "   ",
        "1 +",
        "(1 + 2",
        "1 + 2)",
        "1 2",
        "2 ** 3",
        "1.5 + 2",
        "x * 3",
        "3 x 4",
        "abs(3)",
        "__import__('os')",
        "1 = 2 = 3",
        "1 + 1 = two",
        "()",
        "-3 + 5",
        "4 * -2",
        "(" * 300 + "1" + ")" * 300,
        "１ + 2",
    ],
)
def test_parser_rejects_garbage_and_unary_minus_by_default(text):
    with pytest.raises(ExpressionError):
        evaluate(text)


def test_unary_minus_is_a_policy():
    assert evaluate("-3 + 5", allow_unary_minus=True).value == 2
    assert evaluate("4 * -(2 - 5)", allow_unary_minus=True).value == 12
    env = CountdownEnv(numbers=[3, 5], target=2)
    env.reset(0)
    assert not env.step("-3 + 5")[-1]["action_is_valid"]
    env = CountdownEnv(numbers=[3, 5], target=2, allow_unary_minus=True)
    env.reset(0)
    assert env.step("-3 + 5")[1] == 1.0


@settings(max_examples=100, deadline=None, derandomize=True)
@given(st.text(alphabet="0123456789+-*/()= x.", max_size=40) | st.text(max_size=40))
def test_parser_never_raises_anything_but_expression_error(text):
    try:
        result = evaluate(text)
    except ExpressionError:
        return
    assert result.value is None or isinstance(result.value, Fraction)


@pytest.mark.parametrize("use_all", [False, True])
def test_generated_targets_are_reachable(use_all):
    for seed in range(60):
        numbers, target = generate_puzzle(random.Random(seed))
        assert 3 <= len(numbers) <= 4 and all(1 <= n <= 99 for n in numbers)
        assert 1 <= target <= 100 and target not in numbers
        answer = solve_countdown(numbers, target, use_all=use_all)
        assert answer is not None
        expr = evaluate(answer)
        assert expr.value == target
        assert (
            sorted(expr.numbers) == sorted(numbers)
            if use_all
            else set(expr.numbers) <= set(numbers)
        )


def test_solver_finds_classic_and_reports_impossible():
    answer = solve_countdown([3, 3, 8, 8], 24, use_all=True)
    assert evaluate(answer).value == 24 and sorted(evaluate(answer).numbers) == [3, 3, 8, 8]
    assert solve_countdown([1, 1, 1], 100) is None
    assert solve_countdown([4, 7], 4) == "4"  # at most once: a lone number counts


def test_rewards_and_number_rules():
    env = CountdownEnv(numbers=[2, 3, 7], target=13)
    env.reset(0)
    obs, r, terminated, truncated, info = env.step("2 * 3 + 7")
    assert (r, terminated, truncated) == (1.0, True, False)
    assert (info["success"], info["reason"]) == (True, "correct")
    assert "correct" in obs
    for answer, reason in [
        ("2 + 3 + 7", "evaluates to 12"),
        ("13", "other than the given"),
        ("7 + 3 + 3", "other than the given"),
        ("7 / (3 - 3)", "division by zero"),
    ]:
        env.reset(0)
        _, r, terminated, truncated, info = env.step(answer)
        assert r == pytest.approx(0.1) and terminated and not truncated  # the one answer
        assert not info["success"] and reason in info["reason"]
    # exactly-once rule
    exact = CountdownEnv(numbers=[2, 3, 7, 1], target=13, number_use="exactly_once")
    exact.reset(0)
    assert exact.step("2 * 3 + 7")[1] == pytest.approx(0.1)
    exact.reset(0)
    assert exact.step("(2 * 3 + 7) * 1")[1] == 1.0
    exact.reset(0)
    assert sorted(evaluate(exact.oracle_action()).numbers) == [1, 2, 3, 7]


def test_invalid_answers_change_nothing_and_attempts_allow_few_turns():
    env = CountdownEnv(numbers=[2, 3, 7], target=13, max_attempts=2)
    assert env.single_turn is False and CountdownEnv().single_turn is True
    obs = env.reset(0)
    assert obs.endswith("Answers left: 2")  # the answer budget is part of the state
    assert "Answers left" not in CountdownEnv().reset(0)
    before = env.snapshot()
    _, r, terminated, truncated, info = env.step("two times three")
    assert not info["action_is_valid"] and r == 0.0 and not terminated and not truncated
    assert env.snapshot() == before and env.render("text") == obs
    obs, r, terminated, truncated, _ = env.step("2 + 3")
    assert r == pytest.approx(0.1) and not terminated and not truncated
    assert obs.endswith("Answers left: 1")
    _, r, terminated, truncated, info = env.step("2 * 3 + 7")
    assert r == 1.0 and terminated and not truncated and info["attempts"] == 2


def test_running_out_of_answers_terminates():
    """The answers left are observed, so the last wrong answer is a terminal state."""
    env = CountdownEnv(numbers=[2, 3, 7], target=13, max_attempts=2)
    env.reset(0)
    env.step("2 + 3")
    obs, r, terminated, truncated, info = env.step("2 + 7")
    assert terminated and not truncated and not info["success"] and r == pytest.approx(0.1)
    assert obs.endswith("Answers left: 0")


def test_env_puzzles_follow_the_seed_and_the_oracle_solves_them():
    env = make("countdown")
    assert [env.reset(s) for s in range(10)] == [env.reset(s) for s in range(10)]
    assert len({env.reset(s) for s in range(10)}) == 10
    for seed in range(20):
        env.reset(seed)
        _, r, terminated, truncated, info = env.step(env.oracle_action())
        assert r == 1.0 and terminated and not truncated and info["success"]
    rng = random.Random(0)
    for seed in range(20):
        env.reset(seed)
        assert env.step(env.random_action(rng))[-1]["action_is_valid"]


def test_bad_configs():
    with pytest.raises(ValueError, match="number_use"):
        CountdownEnv(number_use="twice")
    with pytest.raises(ValueError, match="max_numbers"):
        CountdownEnv(max_numbers=9)
    with pytest.raises(ValueError, match="both numbers and target"):
        CountdownEnv(numbers=[1, 2])
