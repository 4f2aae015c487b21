"""A 2x2x2 Rubik's cube: undo a scramble of ``scramble_depth`` random face turns.

The cube is 24 stickers, each a (cubie position, outward normal) pair in 3D with
coordinates in {-1, +1}; a face turn rotates every sticker whose position lies on that
face by 90 degrees (clockwise seen from the face). The permutations are computed from
the rotation matrices, not typed in.

Actions: ``U R F`` (clockwise quarter turn of the up, right, front face), ``U' R' F'``
(counter-clockwise) and ``U2 R2 F2`` (half turn); lower case works too. Turning only
these three faces keeps the down-back-left cubie in place, which loses nothing on a 2x2
(any turn of the opposite face is the same as a turn of this face plus a whole-cube
rotation) and makes every state canonical: 3,674,160 of them, at most 11 turns from
solved (half-turn metric).

Reward 1 and ``terminated`` when every face shows one colour; ``max_steps`` turns
truncate the episode (the count is not shown). The scramble (``scramble_depth`` turns,
never the same face twice in a row) is a pure function of the seed; its optimal
distance may be shorter than the depth.

Solver: meet in the middle. All states within ``_TABLE_DEPTH`` (6) turns of solved are
tabulated once per process (about 62,000 states, under a second); a breadth-first search
from the current state then stops at the first state in the table. Every state is at
most 11 turns away, so the forward search is at most 5 deep and the plan is optimal.
"""

from __future__ import annotations

import itertools
import random

import numpy as np

from ragen.errors import EnvOptionError

from ..base import Env, StepResult, derive_seed, make_info
from . import rgb

FACES = {
    "U": (0, 1, 0),
    "D": (0, -1, 0),
    "R": (1, 0, 0),
    "L": (-1, 0, 0),
    "F": (0, 0, 1),
    "B": (0, 0, -1),
}
TURN_FACES = ("U", "R", "F")
ACTION_NAMES = [f + s for f in TURN_FACES for s in ("", "'", "2")]
COLOR_NAMES = {"U": "W", "D": "Y", "F": "G", "B": "B", "R": "R", "L": "O"}  # letters in the text
_RGB = {
    "W": (245, 245, 245),
    "Y": (250, 215, 20),
    "G": (20, 160, 60),
    "B": (20, 70, 200),
    "R": (200, 25, 30),
    "O": (250, 130, 20),
}
_TABLE_DEPTH = 6
GODS_NUMBER = 11  # half-turn metric

# stickers: (position, normal); position has each coordinate in {-1, 1}
STICKERS: list[tuple[tuple[int, int, int], tuple[int, int, int]]] = [
    (pos, normal)
    for normal in FACES.values()
    for pos in itertools.product((-1, 1), repeat=3)
    if all(p == n for p, n in zip(pos, normal) if n)
]
_INDEX = {s: i for i, s in enumerate(STICKERS)}


def _rotate(v: tuple[int, int, int], axis: tuple[int, int, int]) -> tuple[int, int, int]:
    """``v`` turned -90 degrees about the unit ``axis`` (clockwise seen from its tip)."""
    x, y, z = v
    if axis[0]:
        return (x, z, -y) if axis[0] > 0 else (x, -z, y)
    if axis[1]:
        return (-z, y, x) if axis[1] > 0 else (z, y, -x)
    return (y, -x, z) if axis[2] > 0 else (-y, x, z)


def _turn_permutation(face: str) -> tuple[int, ...]:
    """``perm`` with ``new_state[perm[i]] = state[i]`` for one clockwise quarter turn."""
    axis = FACES[face]
    k = next(i for i in range(3) if axis[i])
    perm = []
    for pos, normal in STICKERS:
        if pos[k] == axis[k]:
            pos, normal = _rotate(pos, axis), _rotate(normal, axis)
        perm.append(_INDEX[(pos, normal)])
    return tuple(perm)


def _compose(*perms: tuple[int, ...]) -> tuple[int, ...]:
    """The permutation of applying ``perms`` in order."""
    out = list(range(len(STICKERS)))
    for perm in perms:
        out = [perm[i] for i in out]
    return tuple(out)


_QUARTER = {f: _turn_permutation(f) for f in FACES}
# gather form: new_state = tuple(state[g] for g in GATHER[move])
MOVES: dict[str, tuple[int, ...]] = {}
for _f in TURN_FACES:
    for _suffix, _times in (("", 1), ("2", 2), ("'", 3)):
        _perm = _compose(*[_QUARTER[_f]] * _times)
        _gather = [0] * len(_perm)
        for _src, _dst in enumerate(_perm):
            _gather[_dst] = _src
        MOVES[_f + _suffix] = tuple(_gather)
INVERSE = {m: (m[0] + {"": "'", "'": "", "2": "2"}[m[1:]]) for m in MOVES}

SOLVED: tuple[str, ...] = tuple(
    COLOR_NAMES[next(f for f, n in FACES.items() if n == normal)] for _, normal in STICKERS
)


def apply(state: tuple[str, ...], move: str) -> tuple[str, ...]:
    gather = MOVES[move]
    return tuple(state[g] for g in gather)


def is_solved(state: tuple[str, ...]) -> bool:
    return state == SOLVED


_TABLE: dict[tuple[str, ...], str | None] | None = None


def _solved_table() -> dict[tuple[str, ...], str | None]:
    """state -> the first move of an optimal path to solved (None at solved), for every
    state within ``_TABLE_DEPTH`` turns; built once per process."""
    global _TABLE
    if _TABLE is None:
        table: dict[tuple[str, ...], str | None] = {SOLVED: None}
        frontier = [SOLVED]
        for _ in range(_TABLE_DEPTH):
            nxt = []
            for state in frontier:
                for move in MOVES:
                    child = apply(state, move)
                    if child not in table:
                        table[child] = INVERSE[move]  # undoing `move` leads back toward solved
                        nxt.append(child)
            frontier = nxt
        _TABLE = table
    return _TABLE


def solve(state: tuple[str, ...]) -> list[str]:
    """A shortest list of moves from ``state`` to solved (half-turn metric)."""
    table = _solved_table()

    def tail(s: tuple[str, ...]) -> list[str]:
        out = []
        while (move := table[s]) is not None:
            out.append(move)
            s = apply(s, move)
        return out

    if state in table:
        return tail(state)
    parents: dict[tuple[str, ...], tuple[tuple[str, ...], str]] = {}
    seen = {state}
    frontier = [state]
    for _ in range(GODS_NUMBER - _TABLE_DEPTH):
        nxt = []
        for s in frontier:
            for move in MOVES:
                child = apply(s, move)
                if child in seen:
                    continue
                seen.add(child)
                parents[child] = (s, move)
                if child in table:  # BFS order: the first hit is on a shortest path
                    head = []
                    node = child
                    while node != state:
                        node, m = parents[node]
                        head.append(m)
                    return head[::-1] + tail(child)
                nxt.append(child)
        frontier = nxt
    raise ValueError("state is not reachable with U, R, F turns (stickers were not permuted)")


def _net_layout() -> list[tuple[int, int, int]]:
    """``(row, col, sticker index)`` of each sticker in the unfolded net (8 x 4 cells):

    ``U`` on top of ``F``, then ``L F R B`` in a row, ``D`` below ``F``."""
    # per face: its 2x2 origin in the net and the (right, up) axes seen from outside
    views = {
        "U": ((0, 2), (1, 0, 0), (0, 0, -1)),
        "L": ((2, 0), (0, 0, 1), (0, 1, 0)),
        "F": ((2, 2), (1, 0, 0), (0, 1, 0)),
        "R": ((2, 4), (0, 0, -1), (0, 1, 0)),
        "B": ((2, 6), (-1, 0, 0), (0, 1, 0)),
        "D": ((4, 2), (1, 0, 0), (0, 0, 1)),
    }
    out = []
    for face, ((r0, c0), right, up) in views.items():
        for i, (pos, normal) in enumerate(STICKERS):
            if normal != FACES[face]:
                continue
            dot = lambda a, b: sum(x * y for x, y in zip(a, b))  # noqa: E731
            row = 0 if dot(pos, up) > 0 else 1
            col = 0 if dot(pos, right) < 0 else 1
            out.append((r0 + row, c0 + col, i))
    return out


_NET = _net_layout()


class Cube2x2Env(Env):
    """A scrambled 2x2x2 cube.

    Config:
        scramble_depth: random turns applied to the solved cube (the difficulty).
        max_steps: turns before the episode is truncated.
    """

    description = "2x2 Rubik's cube scrambled by 3 turns; restore one colour per face"

    def __init__(self, scramble_depth: int = 3, max_steps: int = 20) -> None:
        super().__init__()
        if scramble_depth < 1 or max_steps < 1:
            raise EnvOptionError(
                f"scramble_depth={scramble_depth} and max_steps={max_steps} must be >= 1"
            )
        self.scramble_depth, self.max_steps = int(scramble_depth), int(max_steps)
        self.state: tuple[str, ...] = SOLVED
        self.scramble: list[str] = []
        self.steps = 0
        self._plan: list[str] = []
        self._plan_from: tuple[str, ...] | None = None
        self._start_distance = 1

    def _reset(self, seed: int) -> None:
        rng = random.Random(derive_seed("cube2x2", self.scramble_depth, seed))
        for _attempt in range(100):
            moves, last = [], None
            for _ in range(self.scramble_depth):
                face = rng.choice([f for f in TURN_FACES if f != last])
                moves.append(face + rng.choice(("", "'", "2")))
                last = face
            state = SOLVED
            for m in moves:
                state = apply(state, m)
            if not is_solved(state):
                break
        self.scramble, self.state, self.steps = moves, state, 0
        self._plan, self._plan_from = [], None
        self._start_distance = max(1, len(self.optimal_plan()))

    def _step(self, action: str) -> StepResult:
        move = action.upper().replace("’", "'").replace(" ", "")
        if move not in MOVES:
            info = make_info(False, False, False, reason=f"not one of {', '.join(ACTION_NAMES)}")
            return self.render(), 0.0, False, False, info
        self.state = apply(self.state, move)
        self.steps += 1
        solved = is_solved(self.state)
        truncated = not solved and self.steps >= self.max_steps
        return self.render(), float(solved), solved, truncated, make_info(True, True, solved)

    # -- views ------------------------------------------------------------------------------
    @property
    def instructions(self) -> str:
        return (
            "You are solving a scrambled 2x2x2 Rubik's cube. The cube is shown unfolded: "
            "the Up face on top, then the Left, Front, Right and Back faces in a row, the "
            "Down face below; each letter is a sticker colour (W white, Y yellow, G green, "
            "B blue, R red, O orange). Restore the cube so every face shows one colour.\n"
            "Actions: U, R, F turn the up, right or front face a quarter turn clockwise (as "
            "seen looking at that face); U', R', F' turn it counter-clockwise; U2, R2, F2 a "
            "half turn. Reward: 1 when solved."
        )

    @property
    def action_names(self) -> list[str]:
        return list(ACTION_NAMES)

    def net(self) -> list[list[str]]:
        """The unfolded cube as 6 rows x 8 columns of colour letters (' ' off the net)."""
        grid = [[" "] * 8 for _ in range(6)]
        for r, c, i in _NET:
            grid[r][c] = self.state[i]
        return grid

    def render(self, mode: str = "text") -> str | np.ndarray:
        if mode == "rgb":
            return self._rgb()
        if mode != "text":
            raise self._unsupported_mode(mode, ("text", "rgb"))
        lines = []
        for row in self.net():
            text = " ".join("".join(row[k : k + 2]) for k in range(0, 8, 2))
            lines.append(text.rstrip())
        return "\n".join(lines)

    def _rgb(self, tile: int = 16) -> np.ndarray:
        letters = list(_RGB)
        tiles = [rgb.fill(tile, (40, 40, 40))]  # code 0: background
        tiles += [rgb.with_border(rgb.fill(tile, _RGB[k]), (0, 0, 0)) for k in letters]
        codes = [0 if ch == " " else 1 + letters.index(ch) for row in self.net() for ch in row]
        return rgb.compose(codes, 8, np.stack(tiles))

    def snapshot(self) -> object:
        return (self.state, self.steps, self.terminated, self.truncated, self.success)

    # -- solver -----------------------------------------------------------------------------
    def optimal_plan(self) -> list[str]:
        """A shortest move list from the current state (cached while the state follows it)."""
        if self._plan_from != self.state:
            self._plan, self._plan_from = solve(self.state), self.state
        return list(self._plan)

    def oracle_action(self) -> str | None:
        if self.done:
            return None
        plan = self.optimal_plan()
        if not plan:
            return None
        # the next state is on the plan: keep its rest cached (no new search per move)
        self._plan, self._plan_from = plan[1:], apply(self.state, plan[0])
        return plan[0]

    progress_potential_meaning = "-(optimal turns left) / (optimal turns from the start)"

    def progress_potential(self) -> float:
        return -len(self.optimal_plan()) / self._start_distance
