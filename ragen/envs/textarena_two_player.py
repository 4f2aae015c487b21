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
:mod:`ragen.envs.textarena_adapter` it is swapped for a private state, under the same
lock, around every call into TextArena.
"""

from __future__ import annotations

import copy
import functools
import random
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ragen.errors import EnvConfigError

from .base import Env, StepResult, derive_seed, make_info
from .textarena_adapter import _RANDOM_LOCK, import_textarena

OPPONENTS = ("random", "heuristic", "checkpoint")
SIDES = ("first", "second", "either")
REWARDS = ("outcome", "win")
_OUTCOME_REWARD = {"outcome": {"win": 1.0, "draw": 0.0, "loss": -1.0}, "win": {"win": 1.0}}


# -- per-game knowledge --------------------------------------------------------------------
@dataclass(frozen=True)
class DuelSpec:
    """What the adapter knows about one two-player TextArena game. Moves are in OUR
    format (``"4"``, ``"0 3"``); ``to_textarena`` writes one in TextArena's."""

    env_id: str
    title: str
    rules: str  # side-independent rules and the action format, for the instructions
    vocabulary: Callable[[Any], list[str]]  # every move name of the game (core env)
    legal: Callable[[Any], list[str]]  # the moves the position allows
    why_illegal: Callable[[Any, str], str]
    to_textarena: Callable[[str], str]
    heuristic: Callable[[Any, int, random.Random], str]  # (core, player id, rng) -> move
    oracle: Callable[[Any, int], str | None]  # (core, player id) -> best move


# Tic Tac Toe: cells 0-8, row-major; player 1 plays X, player 0 plays O (and moves first)
_LINES = [(0, 1, 2), (3, 4, 5), (6, 7, 8), (0, 3, 6), (1, 4, 7), (2, 5, 8), (0, 4, 8), (2, 4, 6)]


def _ttt_cells(core: Any) -> tuple[str, ...]:
    return tuple(c for row in core.state.game_state["board"] for c in row)


def _ttt_mark(pid: int) -> str:
    return "X" if pid == 1 else "O"


def _ttt_winner(cells: tuple[str, ...]) -> str:
    for a, b, c in _LINES:
        if cells[a] and cells[a] == cells[b] == cells[c]:
            return cells[a]
    return ""


def _ttt_wins_with(cells: tuple[str, ...], mark: str) -> list[int]:
    """Empty cells where ``mark`` completes a line."""
    out = []
    for i, c in enumerate(cells):
        if not c:
            trial = cells[:i] + (mark,) + cells[i + 1 :]
            if _ttt_winner(trial) == mark:
                out.append(i)
    return out


@functools.cache
def _ttt_value(cells: tuple[str, ...], mark: str) -> int:
    """Minimax value for the player ``mark`` to move: 10 - plies to a win, 0 draw, negative
    for a loss (so a quicker win and a slower loss score better)."""
    other = "X" if mark == "O" else "O"
    if _ttt_winner(cells):
        return -10  # the previous player (other) has just won
    moves = [i for i, c in enumerate(cells) if not c]
    if not moves:
        return 0
    best = -100
    for i in moves:
        value = -_ttt_value(cells[:i] + (mark,) + cells[i + 1 :], other)
        best = max(best, value - (1 if value > 0 else -1 if value < 0 else 0))
    return best


def _ttt_oracle(core: Any, pid: int) -> str | None:
    cells, mark = _ttt_cells(core), _ttt_mark(pid)
    other = "X" if mark == "O" else "O"
    moves = [i for i, c in enumerate(cells) if not c]
    if not moves or _ttt_winner(cells):
        return None
    # the lowest cell among the best moves: deterministic
    best = max(moves, key=lambda i: (-_ttt_value(cells[:i] + (mark,) + cells[i + 1 :], other), -i))
    return str(best)


def _ttt_heuristic(core: Any, pid: int, rng: random.Random) -> str:
    """Win if possible, else block, else the centre, else a corner, else any cell."""
    cells, mark = _ttt_cells(core), _ttt_mark(pid)
    other = "X" if mark == "O" else "O"
    free = [i for i, c in enumerate(cells) if not c]
    for choice in (
        _ttt_wins_with(cells, mark),
        _ttt_wins_with(cells, other),
        [4] if 4 in free else [],
        [i for i in (0, 2, 6, 8) if i in free],
        free,
    ):
        if choice:
            return str(rng.choice(choice))
    return "4"


def _ttt_why(core: Any, move: str) -> str:
    return f"cell {move} is already taken"


# Connect Four: columns 0-6; player 0 drops X, player 1 drops O; row 0 is the top
def _c4_board(core: Any) -> list[list[str]]:
    return [list(row) for row in core.state.game_state["board"]]


def _c4_mark(pid: int) -> str:
    return "X" if pid == 0 else "O"


def _c4_moves(board: list[list[str]]) -> list[int]:
    return [c for c in range(len(board[0])) if board[0][c] == "."]


def _c4_drop(board: list[list[str]], col: int, mark: str) -> int:
    for r in range(len(board) - 1, -1, -1):
        if board[r][col] == ".":
            board[r][col] = mark
            return r
    raise ValueError(f"column {col} is full")


def _c4_wins_at(board: list[list[str]], r: int, c: int) -> bool:
    mark, rows, cols = board[r][c], len(board), len(board[0])
    for dr, dc in ((0, 1), (1, 0), (1, 1), (1, -1)):
        count = 1
        for sign in (1, -1):
            rr, cc = r + sign * dr, c + sign * dc
            while 0 <= rr < rows and 0 <= cc < cols and board[rr][cc] == mark:
                count += 1
                rr, cc = rr + sign * dr, cc + sign * dc
        if count >= 4:
            return True
    return False


def _c4_winning_moves(board: list[list[str]], mark: str) -> list[int]:
    out = []
    for c in _c4_moves(board):
        r = _c4_drop(board, c, mark)
        if _c4_wins_at(board, r, c):
            out.append(c)
        board[r][c] = "."
    return out


def _c4_center_order(cols: int) -> list[int]:
    mid = (cols - 1) / 2
    return sorted(range(cols), key=lambda c: (abs(c - mid), c))


def _c4_heuristic(core: Any, pid: int, rng: random.Random) -> str:
    """Win now; block the opponent's win; never drop under the opponent's winning cell;
    then the column nearest the centre (ties at random)."""
    board, mark = _c4_board(core), _c4_mark(pid)
    other = "O" if mark == "X" else "X"
    moves = _c4_moves(board)
    for choice in (_c4_winning_moves(board, mark), _c4_winning_moves(board, other)):
        if choice:
            return str(rng.choice(choice))
    safe = []
    for c in moves:
        r = _c4_drop(board, c, mark)
        if c not in _c4_winning_moves(board, other):
            safe.append(c)
        board[r][c] = "."
    pool = safe or moves
    mid = (len(board[0]) - 1) / 2
    nearest = min(abs(c - mid) for c in pool)
    return str(rng.choice([c for c in pool if abs(c - mid) == nearest]))


def _c4_score(board: list[list[str]], mark: str) -> int:
    """Open windows of four: a window holding k of ``mark``'s discs and none of the
    opponent's counts k^2 (and the opponent's the other way)."""
    rows, cols = len(board), len(board[0])
    score = 0
    for r in range(rows):
        for c in range(cols):
            for dr, dc in ((0, 1), (1, 0), (1, 1), (1, -1)):
                end_r, end_c = r + 3 * dr, c + 3 * dc
                if not (0 <= end_r < rows and 0 <= end_c < cols):
                    continue
                window = [board[r + k * dr][c + k * dc] for k in range(4)]
                mine, empty = window.count(mark), window.count(".")
                if mine + empty == 4:
                    score += mine * mine
                elif mine == 0:
                    score -= (4 - empty) ** 2
    return score


def _c4_negamax(board: list[list[str]], mark: str, depth: int, alpha: int, beta: int) -> int:
    other = "O" if mark == "X" else "X"
    moves = _c4_moves(board)
    if not moves:
        return 0
    if depth == 0:
        return _c4_score(board, mark)
    best = -(10**6)
    for c in sorted(moves, key=_c4_center_order(len(board[0])).index):
        r = _c4_drop(board, c, mark)
        if _c4_wins_at(board, r, c):
            value = 10**5 + depth  # a sooner win is worth more
        else:
            value = -_c4_negamax(board, other, depth - 1, -beta, -alpha)
        board[r][c] = "."
        if value > best:
            best = value
        alpha = max(alpha, value)
        if alpha >= beta:
            break
    return best


C4_ORACLE_DEPTH = 4


def _c4_oracle(core: Any, pid: int) -> str | None:
    """Alpha-beta search ``C4_ORACLE_DEPTH`` plies deep over the open-window score
    (centre columns first, the first best column kept: deterministic)."""
    board, mark = _c4_board(core), _c4_mark(pid)
    other = "O" if mark == "X" else "X"
    moves = _c4_moves(board)
    if not moves:
        return None
    best_col, best = moves[0], -(10**7)
    for c in sorted(moves, key=_c4_center_order(len(board[0])).index):
        r = _c4_drop(board, c, mark)
        if _c4_wins_at(board, r, c):
            value = 10**6
        else:
            value = -_c4_negamax(board, other, C4_ORACLE_DEPTH - 1, -(10**7), 10**7)
        board[r][c] = "."
        if value > best:
            best_col, best = c, value
    return str(best_col)


def _c4_why(core: Any, move: str) -> str:
    return f"column {move} is full"


# Nim: piles of objects; a move removes some from one pile; taking the last object wins
def _nim_piles(core: Any) -> list[int]:
    return list(core.state.game_state["piles"])


def _nim_vocabulary(core: Any) -> list[str]:
    return [f"{p} {q}" for p, size in enumerate(core.initial_piles) for q in range(1, size + 1)]


def _nim_legal(core: Any) -> list[str]:
    return [f"{p} {q}" for p, size in enumerate(_nim_piles(core)) for q in range(1, size + 1)]


def _nim_oracle(core: Any, pid: int) -> str | None:
    """Optimal play: leave a nim-sum (xor of the piles) of 0; from a lost position take
    one object from the largest pile (the longest game)."""
    piles = _nim_piles(core)
    if not any(piles):
        return None
    total = 0
    for n in piles:
        total ^= n
    if total:
        for p, n in enumerate(piles):
            if n ^ total < n:
                return f"{p} {n - (n ^ total)}"
    largest = max(range(len(piles)), key=lambda p: (piles[p], -p))
    return f"{largest} 1"


def _nim_heuristic(core: Any, pid: int, rng: random.Random) -> str:
    """Take the last pile whole; with two piles left, even them out; otherwise take a
    random amount from a random pile."""
    piles = _nim_piles(core)
    live = [p for p, n in enumerate(piles) if n]
    if len(live) == 1:
        return f"{live[0]} {piles[live[0]]}"
    if len(live) == 2:
        big, small = sorted(live, key=lambda p: (-piles[p], p))
        if piles[big] > piles[small]:
            return f"{big} {piles[big] - piles[small]}"
    p = rng.choice(live)
    return f"{p} {rng.randint(1, piles[p])}"


def _nim_why(core: Any, move: str) -> str:
    pile, count = (int(x) for x in move.split())
    return f"pile {pile} holds {_nim_piles(core)[pile]}, not {count}"


DUELS: dict[str, DuelSpec] = {
    "TicTacToe-v0": DuelSpec(
        "TicTacToe-v0",
        "Tic Tac Toe",
        "Two players take turns marking the cells of a 3x3 board; three of your marks "
        "in a row, column or diagonal win, a full board without a line is a draw. Cells "
        "are numbered 0-8, row by row (0 1 2 / 3 4 5 / 6 7 8). An action is one cell "
        "number, e.g. '4' for the centre. Actions: 0, 1, 2, 3, 4, 5, 6, 7, 8.",
        vocabulary=lambda core: [str(i) for i in range(9)],
        legal=lambda core: [str(i) for i, c in enumerate(_ttt_cells(core)) if not c],
        why_illegal=_ttt_why,
        to_textarena=lambda move: f"[{move}]",
        heuristic=_ttt_heuristic,
        oracle=_ttt_oracle,
    ),
    "ConnectFour-v0": DuelSpec(
        "ConnectFour-v0",
        "Connect Four",
        "Two players take turns dropping a disc into one of the 7 columns (0-6) of a "
        "6-row board; it falls to the lowest free cell. Four of your discs in a row "
        "(across, down or diagonally) win; a full board is a draw. An action is one "
        "column number, e.g. '3'. Actions: 0, 1, 2, 3, 4, 5, 6.",
        vocabulary=lambda core: [str(c) for c in range(core.num_cols)],
        legal=lambda core: [str(c) for c in _c4_moves(_c4_board(core))],
        why_illegal=_c4_why,
        to_textarena=lambda move: f"[col {move}]",
        heuristic=_c4_heuristic,
        oracle=_c4_oracle,
    ),
    "Nim-v0": DuelSpec(
        "Nim-v0",
        "Nim",
        "There are piles of objects (pile 0, 1, 2, ...). Two players take turns; a turn "
        "removes one or more objects from exactly one pile. Whoever takes the last "
        "object wins. An action is 'pile count', e.g. '0 3' removes 3 objects from pile 0.",
        vocabulary=_nim_vocabulary,
        legal=_nim_legal,
        why_illegal=_nim_why,
        to_textarena=lambda move: f"[{move}]",
        heuristic=_nim_heuristic,
        oracle=_nim_oracle,
    ),
}


def _read_move(action: str, vocabulary: list[str]) -> str | None:
    """Our move name for ``action`` (brackets, 'col' and commas tolerated), or None."""
    text = action.strip().removeprefix("[").removesuffix("]").strip()
    text = re.sub(r"^col(?:umn)?\s*", "", text)
    numbers = re.findall(r"\d+", text)
    if not numbers or re.sub(r"[\d\s,]", "", text):
        return None
    move = " ".join(str(int(n)) for n in numbers)
    return move if move in vocabulary else None


class TwoPlayerTextArenaEnv(Env):
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
            from ragen.agent.opponent import ModelOpponent  # torch: only for this opponent

            self._opponent_model = ModelOpponent(
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
        with _RANDOM_LOCK:
            outer = random.getstate()
            random.setstate(self._random_state)
            try:
                return fn()
            finally:
                self._random_state = random.getstate()
                random.setstate(outer)

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
        move = _read_move(action, vocabulary)
        if move is None:
            info = make_info(False, False, False, reason="not a move of this game (see the rules)")
            return self._obs, 0.0, False, False, info
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
        return _read_move(text or "", self.spec.vocabulary(self._core))

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

    def render(self, mode: str = "text") -> str | np.ndarray:
        if mode != "text":
            raise self._unsupported_mode(mode)
        return self._obs

    def state_key(self) -> str | None:
        # many seeds start alike (an empty board): split train/validation by seed range
        return None

    def snapshot(self) -> object:
        state = self._core.state
        return (
            self._obs,
            repr(state.game_state),
            state.current_player_id,
            state.done,
            self.terminated,
            self.success,
        )

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
