"""TextArena's single-player games as ragen environments (``pip install 'ragen[textarena]'``).

    env = make("ta_tower_of_hanoi")               # a registered game with its own vocabulary
    env = make("textarena", game="Wordle-v0")     # any single-player game, free-form actions

TextArena (the ``textarena`` package) drives a game as ``reset(num_players, seed)`` and
``step(action) -> (done, info)``, with the game's messages queued per player and the
rewards given at the end. The adapter maps that onto the ragen contract:

* **instructions**: the game's own rules (its player prompt) plus the action format;
* **observation**: the game's messages since the last action (the board, feedback such as
  "The target number is higher."), the player prompt and the echo of the action left
  out; when the game ends, its closing reason;
* **actions**: a known game has a vocabulary (``action_names``, or a parser for large
  spaces such as Mastermind's codes) and is sent to TextArena in its bracket format
  (``"A C"`` -> ``"[A C]"``); an unknown game passes the action through, in brackets;
* **rejected moves change nothing**: TextArena answers an invalid move with a warning and
  ends the game after a second one. The adapter plays every action on a deep copy of the
  game and keeps the copy only when TextArena accepted the move, so a rejected move
  leaves the game exactly as it was (and never counts toward that limit). A string that
  is not in the game's vocabulary is an invalid action; a move of the vocabulary that the
  state does not allow (a disk onto a smaller one, a number guessed twice) is valid but
  not effective, like walking into a wall, and the observation says why. For a game
  without a vocabulary TextArena's verdict decides validity;
* **rewards**: TextArena's end reward (1 for a win, partial credit otherwise) on the
  final step, 0 before; ``success`` when it is at least 1. A game's own turn limit is
  stated in its rules, so reaching it terminates (never truncates) the episode.
* **randomness**: TextArena seeds and draws from Python's global ``random``. The adapter
  keeps a private state of it per env (the initial state from ``seed``, later draws from
  the trajectory's ``rng_seed``) and swaps it in under a lock around every call, so
  games are reproducible and nothing else in the process sees its global ``random`` move.

Games tested offline here: ``TowerOfHanoi-v0``, ``GuessTheNumber-v0``, ``Mastermind-v0``
(each with a solver as the oracle). Games that load word lists (Wordle, Hangman, ...)
may need ``nltk`` data from the network on their first reset.
"""

from __future__ import annotations

import copy
import difflib
import itertools
import random
import re
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ragen.errors import EnvOptionError, MissingDependencyError

from ..base import StepResult, derive_seed, make_info, parse_int
from .text_game import TextGameEnv

_RANDOM_LOCK = threading.Lock()  # TextArena uses the process-wide `random` module


def import_textarena() -> Any:
    try:
        import textarena
    except ImportError as err:
        raise MissingDependencyError(
            "textarena is not installed; install it with: pip install 'ragen[textarena]'"
        ) from err
    return textarena


def run_with_random(fn: Callable[[], Any], state: Any) -> tuple[Any, Any]:
    """``(fn(), random state after)``: run TextArena code with ``state`` swapped into the
    process-wide ``random`` (which TextArena seeds and draws from), under one lock, and
    the outer state put back, so games are reproducible and nothing else in the process
    sees its ``random`` move. The caller decides whether to keep the state after."""
    with _RANDOM_LOCK:
        outer = random.getstate()
        random.setstate(state)
        try:
            return fn(), random.getstate()
        finally:
            random.setstate(outer)


# -- per-game knowledge: action vocabulary, translation, solver --------------------------------
@dataclass
class GameSpec:
    """What the adapter knows about one TextArena game."""

    env_id: str
    describe_actions: str  # the action format, appended to the game's rules
    parse: Callable[[Any, str], str | None]  # (core env, normalized action) -> TextArena action
    action_names: Callable[[Any], list[str] | None] = lambda core: None
    oracle: Callable[[Any], str | None] = lambda core: None  # -> an action in OUR format
    random_action: Callable[[Any, random.Random], str] | None = None
    kwargs: dict[str, Any] = field(default_factory=dict)


def _hanoi_parse(core: Any, action: str) -> str | None:
    m = re.fullmatch(r"\[?\s*([abc])\s*(?:,|->|to|\s)?\s*([abc])\s*\]?", action)
    if not m or m.group(1) == m.group(2):
        return None
    return f"[{m.group(1).upper()} {m.group(2).upper()}]"


def _hanoi_oracle(core: Any) -> str | None:
    """Breadth-first search over tower states (3^n of them) to all disks on C."""
    towers = core.state.game_state["towers"]
    start = tuple(tuple(towers[t]) for t in "ABC")
    goal = ((), (), tuple(range(core.num_disks, 0, -1)))
    if start == goal:
        return None
    first: dict[tuple, str | None] = {start: None}
    queue = deque([start])
    while queue:
        state = queue.popleft()
        for s, t in itertools.permutations(range(3), 2):
            if not state[s] or (state[t] and state[t][-1] < state[s][-1]):
                continue
            nxt = [list(p) for p in state]
            nxt[t].append(nxt[s].pop())
            key = tuple(tuple(p) for p in nxt)
            if key in first:
                continue
            first[key] = first[state] or f"{'ABC'[s]} {'ABC'[t]}"
            if key == goal:
                return first[key]
            queue.append(key)
    return None


def _guess_bounds(core: Any) -> tuple[int, int, set[int]]:
    lo, hi = core.min_number, core.max_number
    for guess, hint in core.state.game_state["guess_history"]:
        if hint == "higher":
            lo = max(lo, guess + 1)
        else:
            hi = min(hi, guess - 1)
    return lo, hi, set(core.guessed_numbers)


def _guess_oracle(core: Any) -> str | None:
    """Binary search on the hints so far (what a player can know, never the secret)."""
    lo, hi, guessed = _guess_bounds(core)
    candidates = [n for n in range(lo, hi + 1) if n not in guessed]
    return str(candidates[(len(candidates) - 1) // 2]) if candidates else None


def _guess_parse(core: Any, action: str) -> str | None:
    m = re.fullmatch(r"\[?\s*(\d+)\s*\]?", action)
    guess = parse_int(m.group(1)) if m else None
    if guess is None or not core.min_number <= guess <= core.max_number:
        return None  # out of the game's range: not a move of its vocabulary
    return f"[{guess}]"


def _mastermind_codes(core: Any) -> list[tuple[int, ...]]:
    digits = range(1, core.num_numbers + 1)
    if core.duplicate_numbers:
        return list(itertools.product(digits, repeat=core.code_length))
    return list(itertools.permutations(digits, core.code_length))


def _pegs(guess: tuple[int, ...], code: tuple[int, ...]) -> tuple[int, int]:
    black = sum(g == c for g, c in zip(guess, code))
    common = sum(min(guess.count(d), code.count(d)) for d in set(guess))
    return black, common - black


def _mastermind_oracle(core: Any) -> str | None:
    """The first code (in order) consistent with every feedback so far: it never repeats
    a guess and solves 4-of-6 without repeats in at most 6 or 7 guesses."""
    history = core.state.game_state["history"]
    for code in _mastermind_codes(core):
        if all(_pegs(tuple(h["guess"]), code) == (h["black"], h["white"]) for h in history):
            return " ".join(map(str, code))
    return None


def _mastermind_parse(core: Any, action: str) -> str | None:
    inner = action.strip().removeprefix("[").removesuffix("]")
    if not re.fullmatch(r"[\d\s,]+", inner):
        return None
    numbers = [parse_int(n) for n in re.findall(r"\d+", inner)]
    if len(numbers) != core.code_length:
        return None
    if any(n is None or not 1 <= n <= core.num_numbers for n in numbers):
        return None  # a digit the code cannot hold (9 of 1-6): not a move of this game
    if not core.duplicate_numbers and len(set(numbers)) != len(numbers):
        return None  # a repeated digit where the code has none
    return "[" + " ".join(map(str, numbers)) + "]"


def _mastermind_random(core: Any, rng: random.Random) -> str:
    digits = list(range(1, core.num_numbers + 1))
    if core.duplicate_numbers:
        code = [rng.choice(digits) for _ in range(core.code_length)]
    else:
        code = rng.sample(digits, core.code_length)
    return " ".join(map(str, code))


GAMES: dict[str, GameSpec] = {
    "TowerOfHanoi-v0": GameSpec(
        "TowerOfHanoi-v0",
        "An action moves the top disk of one tower onto another: 'A C' moves from tower A "
        "to tower C. Actions: A B, A C, B A, B C, C A, C B.",
        _hanoi_parse,
        action_names=lambda core: [f"{s} {t}" for s, t in itertools.permutations("ABC", 2)],
        oracle=_hanoi_oracle,
    ),
    "GuessTheNumber-v0": GameSpec(
        "GuessTheNumber-v0",
        "An action is one number, your guess, e.g. '7'.",
        _guess_parse,
        action_names=lambda core: [str(n) for n in range(core.min_number, core.max_number + 1)],
        oracle=_guess_oracle,
    ),
    "Mastermind-v0": GameSpec(
        "Mastermind-v0",
        "An action is one guess: the code's digits separated by spaces, e.g. '2 1 4 5'; each "
        "digit within the game's range, no digit twice unless the rules allow repeats.",
        _mastermind_parse,
        oracle=_mastermind_oracle,
        random_action=_mastermind_random,
    ),
}


def _rejection(feedback: str) -> str:
    """TextArena's reason for rejecting a move, without its boilerplate."""
    m = re.search(r"Reason:\s*(.*?)\s*(?:Please resubmit.*)?$", feedback, re.S)
    reason = (m.group(1) if m else feedback).strip()
    if re.fullmatch(r"[-+0-9.eE]+", reason):  # some games give their score as the reason
        return f"the game rejected the move (its score: {reason})"
    return reason or "the game rejected the move"


def _make_core(ta: Any, game: str, kwargs: dict[str, Any]) -> Any:
    """TextArena's bare game ``game`` (its ``-raw`` id, without the LLM wrappers), or an
    :class:`EnvOptionError` that tells a game TextArena lacks from one it has but cannot
    build here (an API key, nltk data, a module that does not compile)."""
    from textarena.envs.registration import ENV_REGISTRY

    games = sorted(k.removesuffix("-raw") for k in ENV_REGISTRY if k.endswith("-raw"))
    if f"{game}-raw" not in ENV_REGISTRY:
        close = difflib.get_close_matches(game, games, n=1)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        raise EnvOptionError(
            f"TextArena has no game {game!r}.{hint} Its {len(games)} games are the keys of "
            "textarena.envs.registration.ENV_REGISTRY (without '-raw')"
        )
    try:
        return ta.make(f"{game}-raw", **kwargs)
    except Exception as err:  # noqa: BLE001 - SyntaxError, LookupError, ValueError, ...
        raise EnvOptionError(
            f"TextArena has the game {game!r} but cannot build it here: {_why(err)}"
        ) from None


def _why(err: BaseException) -> str:
    """What keeps a TextArena game from being built, in one line, with the fix where known."""
    lines = [line.strip(" *") for line in str(err).splitlines()]
    text = next((line for line in lines if line), "")[:200]
    if isinstance(err, SyntaxError):
        return (
            f"its code does not compile on this Python ({err.msg} at {err.filename}:"
            f"{err.lineno}); a TextArena bug, choose another game"
        )
    if isinstance(err, LookupError) and "Resource" in str(err):
        return f"{text} It needs nltk data, which TextArena downloads on first use (internet)"
    if "API key" in text or "API_KEY" in text:
        return f"it calls an online model and needs an API key: {text}"
    return f"{type(err).__name__}: {text}"


def _message_parts(entry: Any, observation_type: type) -> tuple[str, Any]:
    """``(text, kind)`` of one queued TextArena message. The protocol's order is
    ``(from_id, text, kind)``, but some games (Countdown, Cryptarithm, Slitherlink) queue
    the player's action with the arguments shifted, ``(kind, from_id, text)``: take the
    kind and the text wherever they are."""
    parts = tuple(entry) if isinstance(entry, (tuple, list)) else (entry,)
    kind = next((p for p in parts if isinstance(p, observation_type)), None)
    text = next((p for p in parts if isinstance(p, str)), None)
    return ("" if text is None else text), kind


def _generic_parse(core: Any, action: str) -> str | None:
    if not action:
        return None
    return action if action.startswith("[") else f"[{action}]"


class TextArenaEnv(TextGameEnv):
    """A single-player TextArena game.

    Config:
        game: the TextArena env id (``TowerOfHanoi-v0``; ``ragen.envs.adapters.textarena_env.GAMES``
            lists those with a vocabulary and a solver; others take free-form actions).
        game_kwargs: keyword arguments of the TextArena env (e.g. ``{num_disks: 4}``).
        max_steps: moves before the episode is truncated; every move counts, the ones the
            game rejects too (TextArena's own turn limit counts only accepted ones, so
            without this an agent repeating a forbidden move would play forever).
    """

    description = "A single-player TextArena game (needs ragen[textarena])"

    def __init__(
        self,
        game: str = "TowerOfHanoi-v0",
        game_kwargs: dict[str, Any] | None = None,
        max_steps: int = 100,
    ):
        super().__init__()
        if int(max_steps) < 1:
            raise EnvOptionError(f"max_steps={max_steps} must be >= 1")
        self.max_steps, self._steps = int(max_steps), 0
        ta = import_textarena()
        self.game = str(game)
        base = GAMES.get(self.game)
        self.spec = base or GameSpec(
            self.game,
            "Answer with one move as the rules describe (brackets optional).",
            _generic_parse,
        )
        self.game_kwargs = {**self.spec.kwargs, **dict(game_kwargs or {})}
        self._core = _make_core(ta, self.game, self.game_kwargs)
        self._random_state = random.Random(0).getstate()
        self._obs = self._board = ""  # the observation; the last one a move produced
        self._reward = 0.0
        # the rules come with a reset; read them once from a throwaway game
        prompt, _ = self._call(lambda: self._reset_core(0))
        self._rules = prompt

    # -- TextArena calls with a private global `random` ----------------------------------
    def _call(self, fn: Callable[[], Any], state: Any = None) -> tuple[Any, Any]:
        """``(fn(), random state after)`` with ``state`` (default: this env's) as
        TextArena's ``random`` (:func:`run_with_random`)."""
        return run_with_random(fn, self._random_state if state is None else state)

    def _reset_core(self, seed: int) -> str:
        core_seed = derive_seed("textarena", self.game, seed) % (2**32)
        self._core.reset(num_players=1, seed=core_seed)
        prompt, messages = self._drain(self._core)
        self._obs = self._board = messages or "The game has started. Make your first move."
        return prompt

    @staticmethod
    def _drain(core: Any) -> tuple[str, str]:
        """``(player prompt, other game messages)`` queued for the player, emptied."""
        from textarena import ObservationType

        _, queued = core.get_observation()
        messages = [_message_parts(entry, ObservationType) for entry in queued]
        prompt = "\n".join(m for m, kind in messages if kind == ObservationType.PROMPT)
        rest = [
            m.strip()
            for m, kind in messages
            if kind not in (ObservationType.PROMPT, ObservationType.PLAYER_ACTION)
        ]
        return prompt.strip(), "\n".join(m for m in rest if m)

    # -- the contract ----------------------------------------------------------------------
    def _reset(self, seed: int) -> None:
        self._reward, self._steps = 0.0, 0
        _, self._random_state = self._call(
            lambda: self._reset_core(seed), random.Random(derive_seed("textarena", seed)).getstate()
        )
        # from here on the game's draws follow the trajectory's dynamics seed
        self._random_state = random.Random(self.rng.getrandbits(64)).getstate()

    def _step(self, action: str) -> StepResult:
        move = self.spec.parse(self._core, action)
        if move is None:
            return self._invalid("not a move of this game; " + self.spec.describe_actions)
        trial = copy.deepcopy(self._core)  # an invalid move must leave the game untouched
        (done, _), state_after = self._call(lambda: trial.step(move))
        ta_state = trial.state
        if ta_state.error_count > 0 or ta_state.game_info[0].get("invalid_move"):
            _, feedback = self._drain(trial)
            reason = _rejection(feedback)
            if self.spec.env_id not in GAMES:  # no vocabulary: the game's verdict decides
                return self._invalid(reason)
            # a move of the vocabulary that the state does not allow (a disk onto a smaller
            # one): like walking into a wall, valid but without effect; the game is
            # unchanged, but the move counts toward max_steps
            self._steps += 1
            obs = f"{self._board}\nThat move is not allowed: {reason}"
            self._obs = obs
            truncated = self._steps >= self.max_steps
            info = make_info(True, False, False, reason=reason, steps=self._steps)
            return obs, 0.0, False, truncated, info
        self._steps += 1
        self._core, self._random_state = trial, state_after
        _, messages = self._drain(trial)
        reward = 0.0
        if done:
            rewards = ta_state.rewards or {}
            reward = float(rewards.get(0, 0.0))
            reason = ta_state.game_info[0].get("reason") or "the game is over"
            messages = f"{messages}\nGame over: {reason}".strip()
        self._reward = reward
        self._obs = self._board = messages or "(the game sent no message)"
        success = bool(done and reward >= 1.0)
        truncated = not done and self._steps >= self.max_steps
        info = make_info(True, True, success, move=move, steps=self._steps)
        return self._obs, reward, bool(done), truncated, info

    @property
    def instructions(self) -> str:
        limit = f"At most {self.max_steps} moves, rejected ones included."
        return f"{self._rules}\n{self.spec.describe_actions}\n{limit}".strip()

    @property
    def action_names(self) -> list[str] | None:
        return self.spec.action_names(self._core)

    def _game_state(self) -> tuple:
        state = self._core.state
        return (self._steps, repr(state.game_state), state.turn, state.done)

    # -- reference policies ----------------------------------------------------------------
    def oracle_action(self) -> str | None:
        return None if self.done else self.spec.oracle(self._core)

    def random_action(self, rng: random.Random) -> str:
        if self.spec.random_action is not None:
            return self.spec.random_action(self._core, rng)
        return super().random_action(rng)
