"""Countdown: combine the given numbers with + - * / and parentheses to hit a target.

The answer (one action) is an arithmetic expression, parsed by our own safe parser
(:mod:`ragen.envs.games.arithmetic`, exact fractions, never ``eval``). Rewards:

* 1.0 for a correct expression that uses each given number at most once (or exactly
  once, with ``number_use="exactly_once"``);
* ``partial_reward`` (0.1) for a well-formed expression that is wrong (wrong value,
  wrong numbers, or a division by zero);
* an unparsable answer is an invalid action (nothing changes, no reward).

A correct answer, or the last of ``max_attempts`` answers, terminates the episode (the
answers left are shown in the observation when ``max_attempts > 1``, so running out is
a terminal state of what the agent sees, not a hidden cut). Countdown never truncates.

Puzzles are generated per seed: 3-4 numbers and a target built by combining them with
random operations (so it is reachable), then confirmed by an exhaustive solver, which
also provides the oracle's answer.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Sequence
from fractions import Fraction

import numpy as np

from ragen.errors import EnvOptionError

from ..base import Env, StepResult, derive_seed, make_info
from .arithmetic import ExpressionError, evaluate

NUMBER_USE = ("at_most_once", "exactly_once")
_GENERATE_TRIES = 1000


def solve_countdown(numbers: Sequence[int], target: int, use_all: bool = False) -> str | None:
    """An expression reaching ``target`` from ``numbers`` (each used at most once, or
    exactly once when ``use_all``), or None when impossible.

    Exhaustive search: repeatedly replace two items by a combination (+, -, *, / in both
    orders, exact fractions); dead ends are memoized on the sorted multiset of values.
    """
    goal = Fraction(target)
    failed: set[tuple[Fraction, ...]] = set()

    def search(items: list[tuple[Fraction, str]]) -> str | None:
        if not use_all or len(items) == 1:
            for value, text in items:
                if value == goal:
                    return text
        if len(items) == 1:
            return None
        key = tuple(sorted(v for v, _ in items))
        if key in failed:
            return None
        for i in range(len(items)):
            for j in range(i + 1, len(items)):
                (a, ea), (b, eb) = items[i], items[j]
                rest = items[:i] + items[i + 1 : j] + items[j + 1 :]
                options = [
                    (a + b, f"({ea} + {eb})"),
                    (a * b, f"({ea} * {eb})"),
                    (a - b, f"({ea} - {eb})"),
                    (b - a, f"({eb} - {ea})"),
                ]
                if b != 0:
                    options.append((a / b, f"({ea} / {eb})"))
                if a != 0:
                    options.append((b / a, f"({eb} / {ea})"))
                for value, text in options:
                    found = search(rest + [(value, text)])
                    if found is not None:
                        return found
        failed.add(key)
        return None

    found = search([(Fraction(n), str(n)) for n in numbers])
    if found is not None and found.startswith("(") and found.endswith(")"):
        found = found[1:-1]  # the outermost pair is always redundant
    return found


def generate_puzzle(
    rng: random.Random,
    min_numbers: int = 3,
    max_numbers: int = 4,
    max_number: int = 99,
    max_target: int = 100,
) -> tuple[list[int], int]:
    """Random numbers and a target reachable using all of them (hence also at most once).

    The target is the result of combining the shuffled numbers in random order with
    random operations, keeping only positive integer intermediate results.
    """
    for _ in range(_GENERATE_TRIES):
        count = rng.randint(min_numbers, max_numbers)
        numbers = [rng.randint(1, max_number) for _ in range(count)]
        pool = list(numbers)
        rng.shuffle(pool)
        while len(pool) > 1:
            a, b = pool.pop(rng.randrange(len(pool))), pool.pop(rng.randrange(len(pool)))
            choices = [a + b, a * b]
            if a != b:
                choices.append(abs(a - b))
            hi, lo = max(a, b), min(a, b)
            if hi % lo == 0 and lo != 1:
                choices.append(hi // lo)
            pool.append(rng.choice(choices))
        target = pool[0]
        # skip trivial puzzles (target is one of the numbers)
        if 1 <= target <= max_target and target not in numbers:
            return numbers, target
    raise EnvOptionError(
        f"no puzzle with max_target={max_target} from {min_numbers}-{max_numbers} numbers up to "
        f"max_number={max_number} in {_GENERATE_TRIES} tries; raise max_target"
    )


class CountdownEnv(Env):
    """Countdown arithmetic puzzle.

    Config:
        min_numbers, max_numbers: how many numbers a generated puzzle has.
        max_number: largest generated number (smallest is 1).
        max_target: largest generated target.
        number_use: ``"at_most_once"`` (default) or ``"exactly_once"``.
        partial_reward: reward for a well-formed but wrong expression.
        allow_unary_minus: accept ``-x`` (off: negation is not a Countdown operation).
        max_attempts: answers allowed per episode (1 = single turn).
        numbers, target: play this fixed puzzle instead of generating one.
    """

    description = "Countdown: reach the target from 3-4 numbers with + - * / (single turn)"
    single_turn = True

    def __init__(
        self,
        min_numbers: int = 3,
        max_numbers: int = 4,
        max_number: int = 99,
        max_target: int = 100,
        number_use: str = "at_most_once",
        partial_reward: float = 0.1,
        allow_unary_minus: bool = False,
        max_attempts: int = 1,
        numbers: Sequence[int] | None = None,
        target: int | None = None,
    ) -> None:
        super().__init__()
        if number_use not in NUMBER_USE:
            raise EnvOptionError(f"number_use={number_use!r}; use one of {', '.join(NUMBER_USE)}")
        if not 2 <= min_numbers <= max_numbers <= 5:
            raise EnvOptionError(
                "need 2 <= min_numbers <= max_numbers <= 5 (the solver is exhaustive), got "
                f"min_numbers={min_numbers}, max_numbers={max_numbers}"
            )
        if max_number < 1 or max_target < 1:
            raise EnvOptionError(
                f"max_number={max_number} and max_target={max_target} must be >= 1"
            )
        if max_attempts < 1:
            raise EnvOptionError(f"max_attempts={max_attempts} must be >= 1")
        if (numbers is None) != (target is None):
            raise EnvOptionError("give both numbers and target for a fixed puzzle, or neither")
        self.min_numbers, self.max_numbers = int(min_numbers), int(max_numbers)
        self.max_number, self.max_target = int(max_number), int(max_target)
        self.number_use = number_use
        self.partial_reward = float(partial_reward)
        self.allow_unary_minus = bool(allow_unary_minus)
        self.max_attempts = int(max_attempts)
        self.single_turn = self.max_attempts == 1
        self.fixed = None
        if numbers is not None:
            fixed_numbers = [int(n) for n in numbers]
            if not fixed_numbers or any(n < 0 for n in fixed_numbers):
                raise EnvOptionError(f"numbers={list(numbers)} must be non-negative integers")
            self.fixed = (fixed_numbers, int(target))  # type: ignore[arg-type]
        self.numbers, self.target = self.fixed or ([1, 2, 3], 6)
        self._solution: str | None = None
        self._attempts = 0
        self._feedback = ""

    # -- episode ------------------------------------------------------------------------------
    def _reset(self, seed: int) -> None:
        if self.fixed is not None:
            self.numbers, self.target = list(self.fixed[0]), self.fixed[1]
        else:
            rng = random.Random(derive_seed("countdown", seed))
            self.numbers, self.target = generate_puzzle(
                rng, self.min_numbers, self.max_numbers, self.max_number, self.max_target
            )
        self._solution = None
        self._solved_for: tuple | None = None
        self._attempts = 0
        self._feedback = ""

    def _step(self, action: str) -> StepResult:
        try:
            expr = evaluate(action, self.allow_unary_minus)
        except ExpressionError as err:
            info = make_info(False, False, False, reason=f"unparsable: {err}")
            return self.render("text"), 0.0, False, False, info
        self._attempts += 1
        if expr.value is None:
            reason = "division by zero"
        elif not self._numbers_ok(expr.numbers):
            rule = "each at most once" if self.number_use == "at_most_once" else "each exactly once"
            reason = f"uses numbers other than the given ones ({rule})"
        elif expr.value != self.target:
            reason = f"evaluates to {_show(expr.value)}, not {self.target}"
        else:
            reason = "correct"
        correct = reason == "correct"
        reward = 1.0 if correct else self.partial_reward
        terminated = correct or self._attempts >= self.max_attempts
        self._feedback = (
            f"Your answer {expr.text} is {'correct' if correct else 'wrong: ' + reason}."
        )
        info = make_info(True, True, correct, reason=reason, attempts=self._attempts)
        return self.render("text"), reward, terminated, False, info

    def _numbers_ok(self, used: Sequence[int]) -> bool:
        have, want = Counter(self.numbers), Counter(used)
        if self.number_use == "exactly_once":
            return have == want
        return all(have[n] >= k for n, k in want.items())

    # -- views -----------------------------------------------------------------------------------
    def snapshot(self) -> object:
        return (tuple(self.numbers), self.target, self._attempts, self._feedback, self.done)

    @property
    def instructions(self) -> str:
        use = "at most once" if self.number_use == "at_most_once" else "exactly once"
        unary = "" if self.allow_unary_minus else " Unary minus (like -3) is not allowed."
        return (
            "You are playing Countdown. Combine the given numbers with +, -, *, / and "
            f"parentheses to reach the target exactly. Use each given number {use}; numbers "
            f"that are not given may not appear.{unary} Division is exact (fractions are "
            "allowed in intermediate steps).\n"
            f"Reward: 1 for a correct expression, {self.partial_reward:g} for a well-formed "
            "but wrong one. "
            + (
                "You have one answer."
                if self.max_attempts == 1
                else f"You have {self.max_attempts} answers."
            )
            + "\nAnswer with one arithmetic expression, e.g. '(3 + 5) * 2'."
        )

    def render(self, mode: str = "text") -> str | np.ndarray:
        if mode != "text":
            raise self._unsupported_mode(mode)
        lines = [f"Numbers: {', '.join(map(str, self.numbers))}", f"Target: {self.target}"]
        if self._feedback:
            lines.append(self._feedback)
        if self.max_attempts > 1:  # the answer budget is part of the state
            lines.append(f"Answers left: {self.max_attempts - self._attempts}")
        return "\n".join(lines)

    # -- reference policies ----------------------------------------------------------------------
    def oracle_action(self) -> str | None:
        """A solving expression (None if the fixed puzzle has no solution)."""
        if self.done:
            return None
        key = (tuple(self.numbers), self.target, self.number_use)
        if self._solved_for != key:
            use_all = self.number_use == "exactly_once"
            self._solution = solve_countdown(self.numbers, self.target, use_all)
            self._solved_for = key
        return self._solution

    def random_action(self, rng: random.Random) -> str:
        """A random well-formed expression over a random selection of the numbers."""
        pool = [str(n) for n in self.numbers]
        rng.shuffle(pool)
        if self.number_use == "at_most_once":
            pool = pool[: rng.randint(1, len(pool))]
        while len(pool) > 1:
            a = pool.pop(rng.randrange(len(pool)))
            b = pool.pop(rng.randrange(len(pool)))
            pool.append(f"({a} {rng.choice('+-*/')} {b})")
        text = pool[0]
        return text[1:-1] if text.startswith("(") and text.endswith(")") else text


def _show(value: Fraction) -> str:
    return (
        str(value.numerator) if value.denominator == 1 else f"{value.numerator}/{value.denominator}"
    )
