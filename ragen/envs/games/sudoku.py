"""Sudoku (4x4 and 9x9): fill the grid so every row, column and box holds each digit once.

Puzzles are generated per seed with a UNIQUE solution: a random full grid (randomized
backtracking), then cells are emptied in a random order, each removal kept only if the
puzzle still has exactly one solution, until ``givens`` cells remain (difficulty: fewer
givens is harder). When no further cell can be emptied without losing uniqueness
before reaching ``givens`` (rare above 4x4's 5 and 9x9's 26 givens), the puzzle keeps
the givens it has; ``env.num_givens`` says how many.

Action: ``"row col digit"`` (1-based, e.g. ``"2 3 4"`` puts 4 in row 2, column 3;
commas are accepted too). Rules:

* the cell must not be a given, the digit must be in ``1..size``, and the digit may not
  already stand in the cell's row, column or box: otherwise the action is invalid
  (nothing changes);
* a non-given cell may be overwritten, and digit 0 erases it (mistakes can be corrected);
* reward 1 and ``terminated`` when the grid is full (then it is the unique solution);
  ``max_steps`` valid moves (default: twice the empty cells) truncate the episode (the
  count is not shown).

The oracle writes the solution's digit into the first cell (row-major) that differs
from the solution: optimal, it needs exactly one move per such cell.
"""

from __future__ import annotations

import random
import re

import numpy as np

from ragen.errors import EnvOptionError

from ..base import Env, StepResult, derive_seed, make_info, parse_int
from . import rgb
from .glyphs import draw_text

SIZES = (4, 9)
DEFAULT_GIVENS = {4: 8, 9: 36}
_ACTION = re.compile(r"^\(?\s*(\d+)\s*[ ,]\s*(\d+)\s*\)?\s*[ ,=:]?\s*(\d+)$")


def _box_side(size: int) -> int:
    return 2 if size == 4 else 3


def _peers(size: int) -> list[list[int]]:
    """For each cell index, the other cells of its row, column and box."""
    b = _box_side(size)
    out = []
    for i in range(size * size):
        r, c = divmod(i, size)
        br, bc = r // b * b, c // b * b
        same = {r * size + k for k in range(size)} | {k * size + c for k in range(size)}
        same |= {(br + dr) * size + bc + dc for dr in range(b) for dc in range(b)}
        same.discard(i)
        out.append(sorted(same))
    return out


def count_solutions(grid: list[int], size: int, limit: int = 2, rng: random.Random | None = None):
    """``(number of solutions up to limit, first solution found or None)``.

    ``grid`` is row-major with 0 for empty. Backtracking on the empty cell with the
    fewest candidates (bitmasks of the digits used by its peers); ``rng`` shuffles the
    candidate order (used to draw random full grids).
    """
    peers = _peers(size)
    full = (1 << (size + 1)) - 2  # bits 1..size
    cells = list(grid)
    found: list[list[int]] = []
    count = 0

    def candidates(i: int) -> int:
        used = 0
        for p in peers[i]:
            used |= 1 << cells[p]
        return full & ~used

    def search() -> bool:  # True: stop (limit reached)
        nonlocal count
        best, best_mask, best_n = -1, 0, size + 1
        for i, v in enumerate(cells):
            if v == 0:
                mask = candidates(i)
                n = bin(mask).count("1")
                if n < best_n:
                    best, best_mask, best_n = i, mask, n
                    if n <= 1:
                        break
        if best < 0:
            count += 1
            if not found:
                found.append(list(cells))
            return count >= limit
        digits = [d for d in range(1, size + 1) if best_mask >> d & 1]
        if rng is not None:
            rng.shuffle(digits)
        for d in digits:
            cells[best] = d
            if search():
                cells[best] = 0
                return True
        cells[best] = 0
        return False

    search()
    return count, (found[0] if found else None)


def generate_puzzle(rng: random.Random, size: int, givens: int) -> tuple[list[int], list[int]]:
    """``(puzzle, solution)``, row-major with 0 for empty; the puzzle has a unique solution."""
    _, solution = count_solutions([0] * size * size, size, limit=1, rng=rng)
    assert solution is not None  # an empty grid is always solvable
    puzzle = list(solution)
    order = list(range(size * size))
    rng.shuffle(order)
    filled = size * size
    for i in order:
        if filled <= givens:
            break
        keep, puzzle[i] = puzzle[i], 0
        if count_solutions(puzzle, size, limit=2)[0] != 1:
            puzzle[i] = keep  # this cell is needed for uniqueness
        else:
            filled -= 1
    return puzzle, solution


class SudokuEnv(Env):
    """Sudoku with a unique solution per seed.

    Config:
        size: 4 (2x2 boxes) or 9 (3x3 boxes).
        givens: filled cells at the start (default 8 for 4x4, 36 for 9x9); fewer is harder.
        max_steps: valid moves before the episode is truncated (default 2 x empty cells).
    """

    description = "Sudoku 4x4 (8 givens): fill rows, columns and boxes with 1-4"

    def __init__(self, size: int = 4, givens: int | None = None, max_steps: int | None = None):
        super().__init__()
        if size not in SIZES:
            raise EnvOptionError(f"size={size}; Sudoku sizes are {SIZES}")
        self.size = int(size)
        self.givens = DEFAULT_GIVENS[self.size] if givens is None else int(givens)
        if not 0 <= self.givens <= self.size * self.size:
            raise EnvOptionError(f"givens={givens} must be in 0..{self.size * self.size}")
        if max_steps is not None and int(max_steps) < 1:
            raise EnvOptionError(f"max_steps={max_steps} must be >= 1 (or null for the default)")
        self.max_steps = max_steps
        self._peers = _peers(self.size)
        self.grid: list[int] = [0] * self.size**2
        self.fixed: list[bool] = [False] * self.size**2
        self.solution: list[int] = [0] * self.size**2
        self.steps = 0
        self._limit = 1

    @property
    def num_givens(self) -> int:
        return sum(self.fixed)

    # -- episode ---------------------------------------------------------------------------
    def _reset(self, seed: int) -> None:
        rng = random.Random(derive_seed("sudoku", self.size, self.givens, seed))
        puzzle, self.solution = generate_puzzle(rng, self.size, self.givens)
        self.grid = list(puzzle)
        self.fixed = [v != 0 for v in puzzle]
        self.steps = 0
        empty = self.size**2 - self.num_givens
        self._limit = int(self.max_steps) if self.max_steps is not None else max(1, 2 * empty)

    def parse(self, action: str) -> tuple[int, int, int] | None:
        """``(cell index, digit)`` as ``(row0, col0, digit)`` for a well-formed action."""
        m = _ACTION.match(action)
        if not m:
            return None
        numbers = [parse_int(x) for x in m.groups()]
        if None in numbers:  # a number of thousands of digits: not a cell, not a digit
            return None
        r, c, d = numbers
        if not (1 <= r <= self.size and 1 <= c <= self.size and 0 <= d <= self.size):
            return None
        return r - 1, c - 1, d

    def _step(self, action: str) -> StepResult:
        move = self.parse(action)
        if move is None:
            return self._invalid(
                f"not 'row col digit' (row, col in 1..{self.size}, digit 0..{self.size})"
            )
        r, c, d = move
        i = r * self.size + c
        if self.fixed[i]:
            return self._invalid(f"row {r + 1} column {c + 1} is a given")
        clash = [p for p in self._peers[i] if d and self.grid[p] == d]
        if clash:
            pr, pc = divmod(clash[0], self.size)
            return self._invalid(f"{d} already stands at row {pr + 1} column {pc + 1}")
        effective = self.grid[i] != d
        self.grid[i] = d
        self.steps += 1
        solved = all(self.grid)  # full + no clash = the (unique) solution
        truncated = not solved and self.steps >= self._limit
        info = make_info(True, effective, solved)
        return self.render(), 1.0 if solved else 0.0, solved, truncated, info

    def _invalid(self, reason: str) -> StepResult:
        return self.render(), 0.0, False, False, make_info(False, False, False, reason=reason)

    # -- views -------------------------------------------------------------------------------
    @property
    def instructions(self) -> str:
        n, b = self.size, _box_side(self.size)
        return (
            f"You are solving a {n}x{n} Sudoku. Fill every empty cell ('.') with a digit "
            f"1-{n} so that each row, each column and each {b}x{b} box (separated by '|' and "
            f"'-') contains every digit exactly once. Rows and columns are numbered 1-{n} "
            "from the top-left.\n"
            f"An action is 'row col digit', e.g. '2 3 {min(4, n)}' writes {min(4, n)} in row "
            "2, column 3. Given cells cannot change; a digit already in the same row, column "
            "or box is not allowed; your own digits may be overwritten, and digit 0 erases "
            "one.\n"
            "Reward: 1 when the grid is complete."
        )

    def render(self, mode: str = "text") -> str | np.ndarray:
        if mode == "rgb":
            return self._rgb()
        if mode != "text":
            raise self._unsupported_mode(mode, ("text", "rgb"))
        n, b = self.size, _box_side(self.size)
        header = "    " + " | ".join(
            " ".join(str(c + 1) for c in range(k, k + b)) for k in range(0, n, b)
        )
        rule = "    " + "-+-".join("-" * (2 * b - 1) for _ in range(n // b))
        lines = [header, rule]
        for r in range(n):
            if r and r % b == 0:
                lines.append(rule)
            cells = [str(v) if v else "." for v in self.grid[r * n : (r + 1) * n]]
            row = " | ".join(" ".join(cells[k : k + b]) for k in range(0, n, b))
            lines.append(f"{r + 1:>2}  {row}")
        return "\n".join(lines)

    def _rgb(self, tile: int = 24) -> np.ndarray:
        n, b = self.size, _box_side(self.size)
        frame = np.full((n * tile, n * tile, 3), 255, dtype=np.uint8)
        for i, v in enumerate(self.grid):
            r, c = divmod(i, n)
            cell = rgb.with_border(rgb.fill(tile, (250, 250, 245)), (170, 170, 170))
            if v:
                color = (20, 20, 20) if self.fixed[i] else (30, 80, 200)  # givens black
                draw_text(cell, str(v), color)
            frame[r * tile : (r + 1) * tile, c * tile : (c + 1) * tile] = cell
        for k in range(0, n + 1, b):  # thick box lines
            pos = min(k * tile, n * tile - 2)
            frame[pos : pos + 2, :] = 0
            frame[:, pos : pos + 2] = 0
        return frame

    def snapshot(self) -> object:
        return (tuple(self.grid), self.steps, self.terminated, self.truncated, self.success)

    def state_key(self) -> str | None:
        return self.render("text")

    # -- reference policies ----------------------------------------------------------------
    def oracle_action(self) -> str | None:
        """Write the solution's digit into the first cell (row-major) that differs from it
        and where it is allowed. From a puzzle's start every such write is allowed (the
        solution never clashes with itself): one move per empty cell, optimal. When the
        agent's own wrong digits block every such write, erase the first wrong digit."""
        if self.done:
            return None
        wrong = [i for i, v in enumerate(self.grid) if v != self.solution[i]]
        for i in wrong:
            want = self.solution[i]
            if all(self.grid[p] != want for p in self._peers[i]):
                return self._action(i, want)
        for i in wrong:
            if self.grid[i]:
                return self._action(i, 0)
        return None

    def _action(self, i: int, digit: int) -> str:
        r, c = divmod(i, self.size)
        return f"{r + 1} {c + 1} {digit}"

    def random_action(self, rng: random.Random) -> str:
        """A random digit in a random non-given cell (it may clash: then it is invalid)."""
        free = [i for i, f in enumerate(self.fixed) if not f] or list(range(self.size**2))
        return self._action(rng.choice(free), rng.randint(1, self.size))

    progress_potential_meaning = "-(cells that differ from the solution) / (empty cells at start)"

    def progress_potential(self) -> float:
        wrong = sum(v != s for v, s in zip(self.grid, self.solution))
        return -wrong / max(1, self.size**2 - self.num_givens)
