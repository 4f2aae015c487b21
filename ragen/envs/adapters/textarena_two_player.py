"""Two-player TextArena games against a fixed opponent (``pip install 'ragen[textarena]'``).

    env = make("ta_tictactoe")                                     # vs a scripted heuristic
    env = make("ta_connect_four", opponent="random", side="first")
    env = make("ta_nim", opponent="checkpoint", opponent_model="runs/nim/checkpoints/step_100")

TextArena's main use is two-player games. Here the agent plays one side and a fixed
opponent the other, inside one ``step``: the agent's move, then the opponent's reply(s)
until it is the agent's turn again or the game is over. So the env keeps the
single-agent contract (and everything built on it: the rollout, the checker, serving).

* **opponents** (``opponent``): ``"random"`` (a uniformly random legal move),
  ``"heuristic"`` (a scripted player per game: win now, block, prefer the centre, ...;
  beatable) or ``"checkpoint"`` (a frozen ragen model, ``opponent_model=PATH``, that
  reads the game from its own side through the same prompt as the agent and answers
  greedily by default; a move it gets wrong is replaced by a random legal one, counted in
  ``info["opponent_fallbacks"]``). The opponent's ties and random moves draw from the
  env's dynamics RNG, so the members of a group (same seed, own ``rng_seed``) meet
  different opponents' choices.
* **sides** (``side``): ``"first"``, ``"second"``, or ``"either"`` (default: the seed
  decides, so training sees both). The first observation says which side is the
  agent's (TextArena's own player prompt for that side).
* **outcome**: the game's win / draw / loss is ``info["outcome"]``; the reward on the
  final step is +1 / 0 / -1 (``reward="outcome"``) or 1 for a win and 0 otherwise
  (``reward="win"``, counts only wins). ``success`` is a win.
* **actions**: each game has a vocabulary (``action_names``: ``0``..``8`` for Tic Tac
  Toe, a column for Connect Four, ``pile count`` for Nim). A string outside it is an
  invalid action; a move of the vocabulary that the position forbids (an occupied cell,
  a full column, more objects than the pile holds) is valid but not effective, and the
  observation says why: the game is unchanged and the opponent does not move. The
  random reference policy picks a legal move uniformly.
* **oracle**: a solver for the agent's side (perfect minimax for Tic Tac Toe and Nim's
  nim-sum strategy, both optimal; a depth-limited alpha-beta search for Connect Four).

Randomness: TextArena seeds Python's global ``random``; as in
:mod:`ragen.envs.adapters.textarena_env` it is swapped for a private state, under the
same lock, around every call into TextArena (``run_with_random``).
"""

from __future__ import annotations

import copy
import importlib
import random
from collections.abc import Callable
from typing import Any

from ragen.errors import EnvConfigError

from ..base import StepResult, derive_seed, make_info
from .text_game import TextGameEnv
from .textarena_duels import DUELS, read_move
from .textarena_env import import_textarena, run_with_random

OPPONENTS = ("random", "heuristic", "checkpoint")
#: the frozen-model opponent, named by its import path as the env registry names env
#: classes: it loads a model with torch, which the envs package never imports, so it is
#: found by name, and only when a game asks for it
CHECKPOINT_OPPONENT = "ragen.agent.opponent:ModelOpponent"
SIDES = ("first", "second", "either")
REWARDS = ("outcome", "win")
_OUTCOME_REWARD = {"outcome": {"win": 1.0, "draw": 0.0, "loss": -1.0}, "win": {"win": 1.0}}


class TwoPlayerTextArenaEnv(TextGameEnv):
    """One side of a two-player TextArena game against a fixed opponent.

    Config:
        game: the TextArena id (``TicTacToe-v0``, ``ConnectFour-v0``, ``Nim-v0``: the games
            of ``DUELS``).
        opponent: ``"random"``, ``"heuristic"`` or ``"checkpoint"`` (with
            ``opponent_model``).
        side: ``"first"``, ``"second"`` or ``"either"`` (the seed decides).
        reward: ``"outcome"`` (+1 win, 0 draw, -1 loss) or ``"win"`` (1 for a win only).
        opponent_model: the checkpoint or model folder of a ``"checkpoint"`` opponent.
        opponent_temperature: its sampling temperature (0: greedy).
        opponent_reasoning: the reply format it was trained with.
        game_kwargs: keyword arguments of the TextArena game (``{"piles": [1, 3, 5]}``).
    """

    description = "A two-player TextArena game against a fixed opponent (needs ragen[textarena])"

    def __init__(
        self,
        game: str = "TicTacToe-v0",
        opponent: str = "heuristic",
        side: str = "either",
        reward: str = "outcome",
        opponent_model: str | None = None,
        opponent_temperature: float = 0.0,
        opponent_reasoning: str = "free_think",
        game_kwargs: dict[str, Any] | None = None,
    ) -> None:
        super().__init__()
        ta = import_textarena()
        if game not in DUELS:
            raise EnvConfigError(
                f"game={game!r} has no two-player adapter; use one of {', '.join(DUELS)}"
            )
        for key, value, choices in (
            ("opponent", opponent, OPPONENTS),
            ("side", side, SIDES),
            ("reward", reward, REWARDS),
        ):
            if value not in choices:
                raise ValueError(f"{key}={value!r}; use one of {', '.join(choices)}")
        if opponent == "checkpoint" and not opponent_model:
            raise EnvConfigError(
                "opponent='checkpoint' needs the frozen model: opponent_model=PATH "
                "(a run's checkpoint folder or any model folder)"
            )
        self.game, self.spec = game, DUELS[game]
        self.opponent_kind, self.side, self.reward_mode = opponent, side, reward
        self.game_kwargs = dict(game_kwargs or {})
        self._core = ta.make(f"{game}-raw", **self.game_kwargs)
        self._opponent_model: Any = None
        if opponent == "checkpoint":
            module, _, name = CHECKPOINT_OPPONENT.partition(":")
            model_opponent = getattr(importlib.import_module(module), name)
            self._opponent_model = model_opponent(
                str(opponent_model), temperature=opponent_temperature, reasoning=opponent_reasoning
            )
        self._random_state = random.Random(0).getstate()
        self.agent_id = 0
        self._obs = self._board = ""
        self._outcome: str | None = None
        self._fallbacks = 0
        self._call(lambda: self._core.reset(num_players=2, seed=0))  # a valid core before reset

    # -- TextArena calls with a private global `random` -------------------------------------
    def _call(self, fn: Callable[[], Any]) -> Any:
        """``fn()`` with this env's state as TextArena's ``random``, kept after it."""
        result, self._random_state = run_with_random(fn, self._random_state)
        return result

    def _messages(self, pid: int) -> str:
        """The game's messages queued for player ``pid`` (emptied; its player prompt comes
        with the first), without the echo of raw moves (the game describes each move in
        words) or admin notes."""
        from textarena import ObservationType

        queued = self._core.state.observations[pid]
        self._core.state.observations[pid] = []
        drop = {ObservationType.PLAYER_ACTION, ObservationType.GAME_ADMIN}
        texts = [str(m).strip() for _, m, kind in queued if kind not in drop]
        return "\n".join(t for t in texts if t)

    # -- the contract -----------------------------------------------------------------------
    def _reset(self, seed: int) -> None:
        self._random_state = random.Random(derive_seed("textarena2", seed)).getstate()
        core_seed = derive_seed("textarena2", self.game, seed) % (2**32)
        self._call(lambda: self._core.reset(num_players=2, seed=core_seed))
        first = self._core.state.current_player_id
        side = self.side
        if side == "either":
            side = ("first", "second")[derive_seed("side", seed) % 2]
        self.agent_id = first if side == "first" else 1 - first
        self._outcome, self._fallbacks = None, 0
        # from here on TextArena's draws follow the trajectory's dynamics seed
        self._random_state = random.Random(self.rng.getrandbits(64)).getstate()
        intro = self._messages(self.agent_id)
        replies = self._opponent_turns()
        self._board = "\n".join(t for t in (intro, replies) if t)
        self._obs = self._board + self._prompt_tail()

    def _step(self, action: str) -> StepResult:
        vocabulary = self.spec.vocabulary(self._core)
        move = read_move(action, vocabulary)
        if move is None:
            return self._invalid("not a move of this game (see the rules)")
        if move not in self.spec.legal(self._core):
            reason = self.spec.why_illegal(self._core, move)
            self._obs = f"{self._board}\nThat move is not allowed: {reason}.{self._prompt_tail()}"
            return self._obs, 0.0, False, False, make_info(True, False, False, reason=reason)
        self._play(move, self.agent_id)
        mine = self._messages(self.agent_id)
        replies = self._opponent_turns()
        self._board = "\n".join(t for t in (mine, replies) if t) or "(no message)"
        done = self._core.state.done
        reward = 0.0
        if done:
            self._outcome = self._result()
            reward = _OUTCOME_REWARD[self.reward_mode].get(self._outcome, 0.0)
            reason = self._core.state.game_info[self.agent_id].get("reason") or "game over"
            self._board += f"\nGame over ({self._outcome}): {reason}"
        self._obs = self._board + ("" if done else self._prompt_tail())
        info = make_info(
            True,
            True,
            self._outcome == "win",
            move=move,
            outcome=self._outcome,
            opponent_fallbacks=self._fallbacks,
        )
        return self._obs, reward, bool(done), False, info

    def _play(self, move: str, pid: int) -> None:
        state = self._core.state
        if state.current_player_id != pid:
            raise RuntimeError(f"player {pid} moved out of turn")  # a bug here, never input
        self._call(lambda: self._core.step(self.spec.to_textarena(move)))
        if state.made_invalid_move or state.game_info[pid].get("invalid_move"):
            raise RuntimeError(f"TextArena rejected the legal move {move!r}")

    def _opponent_turns(self) -> str:
        """Let the opponent move until it is the agent's turn or the game is over; the
        messages the agent receives meanwhile."""
        opp = 1 - self.agent_id
        while not self._core.state.done and self._core.state.current_player_id == opp:
            legal = self.spec.legal(self._core)
            move = self._opponent_move(opp, legal, self._messages(opp))
            if move not in legal:
                self._fallbacks += 1
                move = self.rng.choice(legal)
            self._play(move, opp)
        return self._messages(self.agent_id)

    def _opponent_move(self, pid: int, legal: list[str], seen: str) -> str | None:
        """The opponent's move; ``seen``: the game's messages to it since its last move."""
        if self.opponent_kind == "random":
            return self.rng.choice(legal)
        if self.opponent_kind == "heuristic":
            return self.spec.heuristic(self._core, pid, self.rng)
        # the checkpoint reads its side as the agent reads its own: the game's messages,
        # its player id, and the legal moves
        view = f"You are Player {pid}.\n{seen}{self._prompt_tail()}"
        text = self._opponent_model.act(self.instructions, view, self.rng)
        return read_move(text or "", self.spec.vocabulary(self._core))

    def _prompt_tail(self) -> str:
        return f"\nYour move. Legal moves: {', '.join(self.spec.legal(self._core))}"

    def _result(self) -> str:
        value = (self._core.state.rewards or {}).get(self.agent_id, 0)
        return "win" if value > 0 else "loss" if value < 0 else "draw"

    @property
    def instructions(self) -> str:
        opponent = {
            "random": "an opponent that plays random legal moves",
            "heuristic": "a scripted opponent",
            "checkpoint": "a fixed trained opponent",
        }[self.opponent_kind]
        scoring = (
            "Reward at the end: +1 for a win, 0 for a draw, -1 for a loss."
            if self.reward_mode == "outcome"
            else "Reward at the end: 1 for a win, 0 otherwise (a draw or a loss)."
        )
        return (
            f"You play {self.spec.title} against {opponent}. Your side (who moves first, "
            "your mark) is given in the first observation; after each of your moves the "
            f"opponent replies.\n{self.spec.rules}\n{scoring}"
        )

    @property
    def action_names(self) -> list[str]:
        return self.spec.vocabulary(self._core)

    def _game_state(self) -> tuple:
        state = self._core.state
        return (repr(state.game_state), state.current_player_id, state.done)

    # -- reference policies -----------------------------------------------------------------
    def oracle_action(self) -> str | None:
        if self.done:
            return None
        return self.spec.oracle(self._core, self.agent_id)

    def random_action(self, rng: random.Random) -> str:
        """A uniformly random legal move (the 'random player')."""
        legal = self.spec.legal(self._core)
        return rng.choice(legal) if legal else self.spec.vocabulary(self._core)[0]

    def __deepcopy__(self, memo: dict) -> TwoPlayerTextArenaEnv:
        """A copy of the game that shares the frozen opponent model (never copied)."""
        if self._opponent_model is not None:
            memo[id(self._opponent_model)] = self._opponent_model
        twin = copy.copy(self)
        for key, value in self.__dict__.items():
            setattr(twin, key, copy.deepcopy(value, memo))
        return twin
