"""2048: slide the tiles, merge equal neighbours, reach the target tile.

The board is ``size x size`` (default 4). A move (``up down left right``) slides every
tile as far as it goes; two equal tiles that meet merge into their sum (each tile at
most once per move). After a move that changed the board a new tile appears on a random
empty cell: 2 with probability 0.9, else 4 (drawn from the env's dynamics RNG, so group
members share the start board but not the new tiles).

* reward: the sum of the tiles merged by the move (the game's score) times
  ``reward_scale`` (default ``1 / win_tile``, so reaching win_tile is worth about
  ``log2(win_tile) - 1`` in total);
* ``terminated`` with ``success`` when a tile reaches ``win_tile``; ``terminated`` without
  success when no move can change the board (game over);
* a move that changes nothing (sliding into a wall) is valid but not effective and
  spawns nothing; ``max_steps`` valid moves truncate the episode (not shown).

The start board (two tiles) is a pure function of the seed. The oracle is a depth-2
expectimax (its move, every chance tile, its next move) over a heuristic of empty cells,
monotone rows/columns and the largest tile in a corner: a strong, not optimal, player.
"""

from __future__ import annotations

import functools
import random

import numpy as np

from ragen.errors import EnvOptionError

from ..base import Env, StepResult, derive_seed, make_info
from . import rgb
from .glyphs import draw_text

ACTION_NAMES = ["up", "down", "left", "right"]
ALIASES = {"u": "up", "d": "down", "l": "left", "r": "right"}
SPAWN_FOUR_P = 0.1

# a board is a tuple of size*size exponents (0 empty, k the tile 2**k), row-major


@functools.lru_cache(maxsize=1 << 16)
def slide_row(row: tuple[int, ...]) -> tuple[tuple[int, ...], int]:
    """Slide one row toward index 0: ``(new row, merged score)`` (exponents in and out)."""
    tiles = [v for v in row if v]
    out, score, i = [], 0, 0
    while i < len(tiles):
        if i + 1 < len(tiles) and tiles[i] == tiles[i + 1]:
            out.append(tiles[i] + 1)
            score += 1 << (tiles[i] + 1)
            i += 2
        else:
            out.append(tiles[i])
            i += 1
    return tuple(out + [0] * (len(row) - len(out))), score


def _lines(size: int, move: str) -> list[list[int]]:
    """Cell indices of each line, ordered from the side the tiles slide toward."""
    rows = [[r * size + c for c in range(size)] for r in range(size)]
    cols = [[r * size + c for r in range(size)] for c in range(size)]
    return {
        "left": rows,
        "right": [line[::-1] for line in rows],
        "up": cols,
        "down": [line[::-1] for line in cols],
    }[move]


@functools.cache
def _all_lines(size: int) -> dict[str, list[list[int]]]:
    return {m: _lines(size, m) for m in ACTION_NAMES}


def apply_move(board: tuple[int, ...], size: int, move: str) -> tuple[tuple[int, ...], int]:
    """``(board after sliding, score)``; no tile is spawned."""
    out = list(board)
    score = 0
    for line in _all_lines(size)[move]:
        new, s = slide_row(tuple(board[i] for i in line))
        score += s
        for i, v in zip(line, new):
            out[i] = v
    return tuple(out), score


def can_move(board: tuple[int, ...], size: int) -> bool:
    return any(apply_move(board, size, m)[0] != board for m in ACTION_NAMES)


def _heuristic(board: tuple[int, ...], size: int) -> float:
    """Empty cells, monotone lines and the largest tile in a corner (higher is better)."""
    empty = board.count(0)
    mono = 0.0
    for lines in (_all_lines(size)["left"], _all_lines(size)["up"]):
        for line in lines:
            vals = [board[i] for i in line]
            inc = sum(max(0, b - a) for a, b in zip(vals, vals[1:]))
            dec = sum(max(0, a - b) for a, b in zip(vals, vals[1:]))
            mono -= min(inc, dec)
    top = max(board)
    corners = (board[0], board[size - 1], board[-size], board[-1])
    return 2.7 * empty + 1.0 * mono + (2.0 * top if top in corners else 0.0)


def _expect(board: tuple[int, ...], size: int, depth: int) -> float:
    """Expected value over the spawned tile (2 or 4 on each empty cell)."""
    empties = [i for i, v in enumerate(board) if v == 0]
    if not empties:
        return _heuristic(board, size)
    total = 0.0
    for i in empties:
        for exp, p in ((1, 1 - SPAWN_FOUR_P), (2, SPAWN_FOUR_P)):
            child = board[:i] + (exp,) + board[i + 1 :]
            total += p * _best(child, size, depth - 1)[0]
    return total / len(empties)


def _best(board: tuple[int, ...], size: int, depth: int) -> tuple[float, str | None]:
    best_value, best_move = -1e9, None
    for move in ACTION_NAMES:
        after, score = apply_move(board, size, move)
        if after == board:
            continue
        merge_bonus = 0.001 * score  # break ties toward merging
        value = _heuristic(after, size) if depth <= 1 else _expect(after, size, depth)
        if value + merge_bonus > best_value:
            best_value, best_move = value + merge_bonus, move
    if best_move is None:
        return -1e6, None  # game over
    return best_value, best_move


def best_move(board: tuple[int, ...], size: int, depth: int = 2) -> str | None:
    """The expectimax move (``depth`` of our moves), None when no move changes the board."""
    return _best(board, size, depth)[1]


# tile colours by exponent (the game's palette, roughly)
_COLORS = [
    (205, 193, 180),
    (238, 228, 218),
    (237, 224, 200),
    (242, 177, 121),
    (245, 149, 99),
    (246, 124, 95),
    (246, 94, 59),
    (237, 207, 114),
    (237, 204, 97),
    (237, 200, 80),
    (237, 197, 63),
    (237, 194, 46),
]


class Game2048Env(Env):
    """2048 on a ``size x size`` board.

    Config:
        size: board side (3..6).
        win_tile: the tile that wins (a power of two >= 8).
        max_steps: valid moves before the episode is truncated.
        reward_scale: factor on the merge score (None: ``1 / win_tile``).
        oracle_depth: expectimax depth of the oracle (1 greedy, 2 default).
    """

    description = "2048 on 4x4: slide and merge tiles to reach 256"

    def __init__(
        self,
        size: int = 4,
        win_tile: int = 256,
        max_steps: int = 1000,
        reward_scale: float | None = None,
        oracle_depth: int = 2,
    ):
        super().__init__()
        if not 3 <= int(size) <= 6:
            raise EnvOptionError(f"size={size} must be in 3..6")
        if win_tile < 8 or win_tile & (win_tile - 1):
            raise EnvOptionError(f"win_tile={win_tile} must be a power of two >= 8")
        if max_steps < 1 or oracle_depth < 1:
            raise EnvOptionError(
                f"max_steps={max_steps} and oracle_depth={oracle_depth} must be >= 1"
            )
        self.size, self.win_tile, self.max_steps = int(size), int(win_tile), int(max_steps)
        self.win_exp = self.win_tile.bit_length() - 1
        self.reward_scale = 1.0 / self.win_tile if reward_scale is None else float(reward_scale)
        self.oracle_depth = int(oracle_depth)
        self.board: tuple[int, ...] = (0,) * self.size**2
        self.score = 0
        self.steps = 0

    def _spawn(self, board: tuple[int, ...], rng: random.Random) -> tuple[int, ...]:
        empties = [i for i, v in enumerate(board) if v == 0]
        i = rng.choice(empties)
        exp = 2 if rng.random() < SPAWN_FOUR_P else 1
        return board[:i] + (exp,) + board[i + 1 :]

    def _reset(self, seed: int) -> None:
        start = random.Random(derive_seed("2048", self.size, seed))
        board: tuple[int, ...] = (0,) * self.size**2
        self.board = self._spawn(self._spawn(board, start), start)
        self.score = self.steps = 0

    def _step(self, action: str) -> StepResult:
        move = ALIASES.get(action, action)
        if move not in ACTION_NAMES:
            info = make_info(False, False, False, reason=f"not one of {', '.join(ACTION_NAMES)}")
            return self.render(), 0.0, False, False, info
        after, score = apply_move(self.board, self.size, move)
        self.steps += 1
        effective = after != self.board
        if effective:
            self.board = self._spawn(after, self.rng)
            self.score += score
        won = max(self.board) >= self.win_exp
        stuck = not won and not can_move(self.board, self.size)
        truncated = not (won or stuck) and self.steps >= self.max_steps
        info = make_info(True, effective, won, merged=score, score=self.score, game_over=stuck)
        return self.render(), score * self.reward_scale, won or stuck, truncated, info

    # -- views ----------------------------------------------------------------------------
    @property
    def instructions(self) -> str:
        return (
            f"You are playing 2048 on a {self.size}x{self.size} board ('.' is empty). A move "
            "slides every tile as far as possible in that direction; two equal tiles that "
            "meet merge into one tile of their sum (a tile merges at most once per move). "
            "After each move that changes the board a new tile (2, or sometimes 4) appears "
            f"on a random empty cell. Reach a {self.win_tile} tile to win; the game is lost "
            "when no move changes the board.\n"
            "Actions: up, down, left, right. Reward: the value of the merged tiles, "
            f"scaled by {self.reward_scale:g}."
        )

    @property
    def action_names(self) -> list[str]:
        return list(ACTION_NAMES)

    def tiles(self) -> list[list[int]]:
        """The board as tile values (0 empty), row by row."""
        n = self.size
        return [[(1 << v) if v else 0 for v in self.board[r * n : (r + 1) * n]] for r in range(n)]

    def render(self, mode: str = "text") -> str | np.ndarray:
        if mode == "rgb":
            return self._rgb()
        if mode != "text":
            raise self._unsupported_mode(mode, ("text", "rgb"))
        width = max(len(str(self.win_tile)), 4)
        return "\n".join(
            " ".join(f"{(str(v) if v else '.'):>{width}}" for v in row) for row in self.tiles()
        )

    def _rgb(self, tile: int = 32) -> np.ndarray:
        codes = []
        cells = []
        for v in self.board:
            cell = rgb.with_border(
                rgb.fill(tile, _COLORS[min(v, len(_COLORS) - 1)]), (187, 173, 160), 2
            )
            if v:
                draw_text(cell, str(1 << v), (119, 110, 101) if v < 3 else (249, 246, 242))
            codes.append(len(cells))
            cells.append(cell)
        return rgb.compose(codes, self.size, np.stack(cells))

    def snapshot(self) -> object:
        return (self.board, self.score, self.steps, self.terminated, self.truncated, self.success)

    # -- reference policies ----------------------------------------------------------------
    def oracle_action(self) -> str | None:
        if self.done:
            return None
        return best_move(self.board, self.size, self.oracle_depth)
