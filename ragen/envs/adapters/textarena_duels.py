"""What the two-player TextArena adapter knows about each game: the vocabulary, the legal
moves, a scripted opponent and a solver (:mod:`ragen.envs.adapters.textarena_two_player`).

Moves are in OUR format (``"4"`` for a Tic Tac Toe cell, ``"3"`` for a Connect Four
column, ``"0 3"`` for Nim), read from TextArena's own game state
(``core.state.game_state``); ``DuelSpec.to_textarena`` writes one in TextArena's bracket
format. Adding a game is one :class:`DuelSpec` in :data:`DUELS` plus a ``register`` line.
"""

from __future__ import annotations

import functools
import random
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..base import parse_int


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


def read_move(action: str, vocabulary: list[str]) -> str | None:
    """Our move name for ``action`` (brackets, 'col' and commas tolerated), or None."""
    text = action.strip().removeprefix("[").removesuffix("]").strip()
    text = re.sub(r"^col(?:umn)?\s*", "", text)
    numbers = re.findall(r"\d+", text)
    if not numbers or re.sub(r"[\d\s,]", "", text):
        return None
    values = [parse_int(n) for n in numbers]  # a 4,301-digit number is no move, no error
    if None in values:
        return None
    move = " ".join(str(v) for v in values)
    return move if move in vocabulary else None
