"""FrozenLake: walk from the start to the goal across slippery ice without falling in a hole.

Dynamics: the intended move happens with probability ``p``; otherwise the agent slides
to one of the two perpendicular directions, each with probability ``(1 - p) / 2``.
``p = 1/3`` is exactly gymnasium's slippery ``FrozenLake-v1``; ``p = 1`` is deterministic.
Moving into the edge of the map leaves the agent in place. Reward +1 on reaching the
goal; the episode ends in a hole or at the goal (or after ``max_steps``).

Maps are random per seed (random start and goal, holes with ``hole_density``, always a
hole-free path between them) or given in gymnasium notation (``desc=["SFFF", ...]``).
The oracle (``oracle_gamma``) is the policy that maximizes the discounted chance of
reaching the goal, ``E[gamma^T 1(goal at step T)]`` with ``gamma = 0.9``: it heads for the
goal and steps around holes. ``oracle_gamma=1`` maximizes the chance of *ever* reaching it
instead; that policy takes long cautious detours (walking into walls so a slip cannot
reach a hole), which a turn budget cannot afford: on random 4x4 maps at ``p = 0.8`` it
reaches the goal within 10 steps in 66% of episodes against 90% for ``gamma = 0.9``, and
its moves are a far harder function of the map to learn.

Observation formats (``observation_format``, see ``ragen.envs.facts``)::

    grid         coord                                          grid_coord
    P_O_         size (4,4); player (0,0); goal (3,3);          the grid, a newline,
    ____         hole (0,2); hole (2,3)                         then the coord text
    ___O
    ___G
"""

from __future__ import annotations

import functools
import random
from collections.abc import Sequence

import numpy as np

from ragen.errors import EnvOptionError

from ..base import Env, StepResult, derive_seed, make_info, normalize_action
from ..facts import (
    COORDINATE_CONVENTION,
    Fact,
    check_observation_format,
    compose_observation,
    coord_legend,
    format_facts,
)
from .rgb import compose, fill, with_border, with_disc, with_square

#: action names in gymnasium's order (0 = left, 1 = down, 2 = right, 3 = up)
ACTION_NAMES: tuple[str, ...] = ("left", "down", "right", "up")
ACTION_ALIASES: dict[str, int] = {
    "left": 0,
    "l": 0,
    "down": 1,
    "d": 1,
    "right": 2,
    "r": 2,
    "up": 3,
    "u": 3,
}
_MOVES = ((0, -1), (1, 0), (0, 1), (-1, 0))  # (drow, dcol) per action

#: text symbols (the RAGEN paper's vocabulary)
SYMBOLS = {
    "player": "P",
    "frozen": "_",
    "hole": "O",
    "goal": "G",
    "player_in_hole": "X",
    "player_on_goal": "√",
}
_MAP_TRIES = 1000
_TILE_CACHE: dict[int, np.ndarray] = {}


def parse_desc(desc: Sequence[str] | str) -> tuple[str, ...]:
    """Validate a map in gymnasium notation (S start, F frozen, H hole, G goal)."""
    rows = desc.split() if isinstance(desc, str) else [str(r) for r in desc]
    if not rows or any(len(r) != len(rows[0]) for r in rows) or not rows[0]:
        raise EnvOptionError(f"desc must be equal-length rows of S/F/H/G, got {desc!r}")
    text = "".join(rows).upper()
    bad = set(text) - set("SFHG")
    if bad:
        raise EnvOptionError(f"desc has unknown cell(s) {sorted(bad)}; use S, F, H, G")
    if text.count("S") != 1 or text.count("G") != 1:
        raise EnvOptionError(f"desc needs exactly one S and one G, got {desc!r}")
    return tuple(r.upper() for r in rows)


def has_path(desc: Sequence[str]) -> bool:
    """Whether a hole-free 4-connected path joins S and G."""
    rows, cols = len(desc), len(desc[0])
    start = next((r, c) for r in range(rows) for c in range(cols) if desc[r][c] == "S")
    seen = {start}
    stack = [start]
    while stack:
        r, c = stack.pop()
        if desc[r][c] == "G":
            return True
        for dr, dc in _MOVES:
            nr, nc = r + dr, c + dc
            if 0 <= nr < rows and 0 <= nc < cols and (nr, nc) not in seen and desc[nr][nc] != "H":
                seen.add((nr, nc))
                stack.append((nr, nc))
    return False


def generate_map(
    rng: random.Random, size: int, hole_density: float, max_tries: int = _MAP_TRIES
) -> tuple[str, ...]:
    """A random ``size x size`` map with random start/goal and a hole-free path.

    Each cell other than start and goal is a hole with probability ``hole_density``;
    maps without a path are redrawn, at most ``max_tries`` times (then ``ValueError``).
    """
    n = size * size
    for _ in range(max_tries):
        start, goal = rng.sample(range(n), 2)
        cells = ["H" if rng.random() < hole_density else "F" for _ in range(n)]
        cells[start], cells[goal] = "S", "G"
        desc = tuple("".join(cells[r * size : (r + 1) * size]) for r in range(size))
        if has_path(desc):
            return desc
    raise EnvOptionError(
        f"hole_density={hole_density} is too high for size={size}: no map with a path from "
        f"start to goal in {max_tries} tries; lower hole_density"
    )


def move(desc: Sequence[str], pos: int, direction: int) -> int:
    """Flat position after moving in ``direction`` (staying put at the map's edge)."""
    cols = len(desc[0])
    r, c = divmod(pos, cols)
    dr, dc = _MOVES[direction]
    nr, nc = r + dr, c + dc
    if 0 <= nr < len(desc) and 0 <= nc < cols:
        return nr * cols + nc
    return pos


def transitions(desc: Sequence[str], pos: int, action: int, p: float) -> list[tuple[float, int]]:
    """``[(probability, next_pos)]`` of ``action`` from ``pos``, equal outcomes merged."""
    out: dict[int, float] = {}
    for direction, prob in (
        ((action - 1) % 4, (1 - p) / 2),
        (action, p),
        ((action + 1) % 4, (1 - p) / 2),
    ):
        if prob > 0:
            nxt = move(desc, pos, direction)
            out[nxt] = out.get(nxt, 0.0) + prob
    return sorted((prob, nxt) for nxt, prob in out.items())


def transition_kernel(desc: Sequence[str], p: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The map's dynamics as arrays, for the solvers.

    Returns:
        ``T`` ``(4, n, n)``: ``T[a, s, s']`` the chance that action ``a`` moves flat cell
        ``s`` to ``s'`` (rows of terminal cells stay 0); ``terminal`` ``(n,)`` bool: hole
        or goal; ``goal`` ``(n,)`` float: 1 at the goal.
    """
    flat = "".join(desc)
    n = len(flat)
    terminal = np.array([ch in "HG" for ch in flat])
    goal = np.array([ch == "G" for ch in flat], dtype=float)
    T = np.zeros((4, n, n))
    for s in range(n):
        if not terminal[s]:
            for a in range(4):
                for prob, nxt in transitions(desc, s, a, p):
                    T[a, s, nxt] += prob
    return T, terminal, goal


@functools.lru_cache(maxsize=4096)
def discounted_success(
    desc: tuple[str, ...], p: float, gamma: float = 0.9, oracle_gamma: float = 0.9
) -> tuple[float, ...]:
    """Per flat cell, ``E[gamma^T 1(goal reached at step T)]`` when following the oracle
    (:func:`oracle_policy` with ``oracle_gamma``): the exact solution of
    ``V = gamma P_pi V`` with ``V(goal) = 1`` and ``V(hole) = 0`` (a linear solve; gamma < 1
    makes it regular). With ``oracle_gamma == gamma`` this is the optimal discounted value."""
    policy = oracle_policy(desc, p, oracle_gamma)
    T, terminal, goal = transition_kernel(desc, p)
    P = T[list(policy), np.arange(len(goal))]  # (n, n): the oracle's moves
    inner = ~terminal
    values = goal.copy()
    A = np.eye(int(inner.sum())) - gamma * P[np.ix_(inner, inner)]
    values[inner] = np.linalg.solve(A, gamma * P[inner] @ goal)
    return tuple(float(v) for v in np.clip(values, 0.0, 1.0))


@functools.lru_cache(maxsize=4096)
def solve_lake(desc: tuple[str, ...], p: float) -> tuple[tuple[int, ...], tuple[float, ...]]:
    """Optimal policy and success probabilities for the slippery dynamics.

    Phase 1 maximizes the probability of ever reaching the goal:
    ``V(s) = max_a sum_s' P(s'|s,a) V(s')``, ``V(goal) = 1``, ``V(hole) = 0``. Value
    iteration from ``V = 0`` converges to the right (least) fixed point but slowly when
    the best play is a cautious loop, so every sweep also evaluates its greedy policy
    exactly (a linear solve) and keeps the larger value; both are lower bounds of the
    optimum, so the result converges to it in a handful of sweeps.

    Phase 2 breaks ties among probability-optimal actions (within 1e-9) by policy
    iteration on the discounted (gamma 0.9) chance of reaching the goal, so the policy
    heads for the goal instead of idling against a wall.

    Returns:
        ``(policy, values)``: per flat cell, the best action id and its success probability
        (terminal cells: action 0, value 1 at the goal and 0 in holes).
    """
    T, terminal, goal = transition_kernel(desc, p)
    n = len(goal)
    states = np.arange(n)

    def evaluate(policy: np.ndarray, gamma: float) -> np.ndarray:
        """Exact value of a deterministic policy: solve ``V = gamma P V`` with V(goal) = 1."""
        P = T[policy, states]  # (n, n)
        # cells from which the policy can reach the goal at all; the others have value 0
        reach = goal > 0
        while True:
            grown = reach | (~terminal & (P[:, reach].sum(axis=1) > 0))
            if (grown == reach).all():
                break
            reach = grown
        unknown = np.flatnonzero(reach & ~terminal)
        values = goal.copy()
        if unknown.size:
            A = np.eye(unknown.size) - gamma * P[np.ix_(unknown, unknown)]
            values[unknown] = np.linalg.solve(A, gamma * P[unknown] @ goal)
        return values

    # phase 1: success probability
    values = goal.copy()
    for _ in range(10_000):
        q = T @ values  # (4, n)
        new = np.where(terminal, goal, q.max(axis=0))
        new = np.maximum(new, evaluate(q.argmax(axis=0), 1.0))
        if np.max(np.abs(new - values)) < 1e-13:
            values = new
            break
        values = new
    q = T @ values
    allowed = q >= values[None, :] - 1e-9

    # phase 2: among optimal actions, the fastest (discounted policy iteration)
    policy = np.argmax(np.where(allowed, q, -np.inf), axis=0)
    for _ in range(1000):
        fast = evaluate(policy, 0.9)
        better = np.argmax(np.where(allowed, T @ fast, -np.inf), axis=0)
        keep = (T[better, states] @ fast) <= (T[policy, states] @ fast) + 1e-12
        better[keep] = policy[keep]  # change only on strict improvement (no flip-flopping)
        if (better == policy).all():
            break
        policy = better
    policy[terminal] = 0
    values = np.clip(values, 0.0, 1.0)  # the linear solves can overshoot 1 by ~1e-15
    return tuple(int(a) for a in policy), tuple(float(v) for v in values)


@functools.lru_cache(maxsize=4096)
def solve_lake_discounted(desc: tuple[str, ...], p: float, gamma: float) -> tuple[int, ...]:
    """The policy maximizing ``E[gamma^T 1(goal reached at step T)]`` (``0 < gamma < 1``).

    Value iteration on ``V(s) = max_a gamma sum_s' P(s'|s,a) V(s')`` with ``V(goal) = 1``
    and ``V(hole) = 0``; it contracts by ``gamma`` per sweep, so ~300 sweeps reach 1e-13 at
    gamma 0.9. Exact ties (symmetric moves) go to the lowest action id. Terminal cells get
    action 0, as in :func:`solve_lake`.
    """
    if not 0.0 < gamma < 1.0:
        raise ValueError(f"gamma={gamma} must be in (0, 1); use solve_lake for gamma = 1")
    T, terminal, goal = transition_kernel(desc, p)
    values = goal.copy()
    for _ in range(10_000):
        new = np.where(terminal, goal, gamma * (T @ values).max(axis=0))
        if np.max(np.abs(new - values)) < 1e-13:
            values = new
            break
        values = new
    q = T @ values  # (4, n)
    # argmax would split float noise between equal moves; round so exact ties go to the
    # lowest id on every platform
    policy = np.argmax(np.round(q, 12), axis=0)
    policy[terminal] = 0
    return tuple(int(a) for a in policy)


def oracle_policy(desc: tuple[str, ...], p: float, oracle_gamma: float) -> tuple[int, ...]:
    """The oracle's action per flat cell: :func:`solve_lake_discounted` for
    ``oracle_gamma < 1``, :func:`solve_lake` (the chance of ever reaching the goal) at 1."""
    if oracle_gamma >= 1.0:
        return solve_lake(desc, p)[0]
    return solve_lake_discounted(desc, p, oracle_gamma)


class FrozenLakeEnv(Env):
    """FrozenLake on a random or given map.

    Config:
        size: side of generated maps.
        hole_density: chance that a generated cell (other than start/goal) is a hole.
        p: probability that the intended move happens (1 = not slippery, 1/3 = gymnasium).
        desc: a fixed map in gymnasium notation, e.g. ``["SFFF", "FHFH", "FFFH", "HFFG"]``;
            when given, ``size`` and ``hole_density`` are ignored.
        max_steps: the episode is truncated (``truncated=True``) after this many steps
            (the observation does not show the step count).
        tile_size: pixel size of one cell in ``render("rgb")``.
        observation_format: ``"grid"`` (default, the symbol grid), ``"coord"`` (the facts
            ``size (rows,cols); player (r,c); goal (r,c); hole (r,c); ...`` with ALL
            holes, which determine the state) or ``"grid_coord"`` (grid, newline, coord).
        oracle_gamma: the oracle maximizes ``E[oracle_gamma^T 1(goal)]`` (default 0.9: soon
            and safely); ``1`` maximizes the chance of ever reaching the goal, ignoring any
            step or turn budget (see the module docstring).

    Facts (``ragen.envs.facts``): ``state_facts()`` is the player, the goal and the holes
    next to the player; ``predict_facts(actions)`` is the player after the intended moves.
    """

    fact_kinds = ("player", "goal", "hole")
    prediction_kinds = ("player",)
    #: kinds of the coord observation (``size (rows,cols)`` is the map's size, not a cell)
    coord_kinds = ("size", "player", "goal", "hole")

    description = "FrozenLake: reach the goal on slippery ice, avoid holes (4x4, p=0.8)"

    def __init__(
        self,
        size: int = 4,
        hole_density: float = 0.2,
        p: float = 0.8,
        desc: Sequence[str] | str | None = None,
        max_steps: int = 100,
        tile_size: int = 16,
        observation_format: str = "grid",
        oracle_gamma: float = 0.9,
    ) -> None:
        super().__init__()
        self.observation_format = check_observation_format(observation_format)
        if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0.0 <= p <= 1.0:
            raise EnvOptionError(f"p={p!r} must be a probability in [0, 1]. Fix: e.g. p=0.8")
        if not 0.0 <= hole_density < 1.0:
            raise EnvOptionError(f"hole_density={hole_density} must be in [0, 1)")
        if not 0.0 < oracle_gamma <= 1.0:
            raise EnvOptionError(
                f"oracle_gamma={oracle_gamma} must be in (0, 1]: 0.9 (soon and safely) or 1 "
                "(the chance of ever reaching the goal)"
            )
        if size < 2:
            raise EnvOptionError(f"size={size} must be >= 2")
        if max_steps < 1:
            raise EnvOptionError(f"max_steps={max_steps} must be >= 1")
        self.size = int(size)
        self.hole_density = float(hole_density)
        self.p = float(p)
        self.max_steps = int(max_steps)
        self.oracle_gamma = float(oracle_gamma)
        self.tile_size = int(tile_size)
        self.fixed_desc = None if desc is None else parse_desc(desc)
        if self.fixed_desc is None:
            # fail at construction, not at the first reset, when the density is hopeless
            generate_map(random.Random(0), self.size, self.hole_density)
        self._load(self.fixed_desc or ("SG",))

    def _load(self, desc: tuple[str, ...]) -> None:
        self.desc = desc
        self.rows, self.cols = len(desc), len(desc[0])
        self._flat = "".join(desc)
        self._start = self._flat.index("S")
        self._pos = self._start
        self._steps = 0
        # the static part of the coord text: every hole, in (row, col) order
        self._holes = [divmod(i, self.cols) for i, ch in enumerate(self._flat) if ch == "H"]
        self._goal = divmod(self._flat.index("G"), self.cols)

    # -- episode ----------------------------------------------------------------------------
    def _reset(self, seed: int) -> None:
        if self.fixed_desc is not None:
            self._load(self.fixed_desc)
        else:
            rng = random.Random(derive_seed("frozen-lake-map", seed))
            self._load(generate_map(rng, self.size, self.hole_density))

    def _step(self, action: str) -> StepResult:
        a = ACTION_ALIASES.get(action)
        if a is None:
            return self.render("text"), 0.0, False, False, make_info(False, False, False)
        u = self.rng.random()
        side = (1.0 - self.p) / 2.0
        direction = a if u < self.p else (a - 1) % 4 if u < self.p + side else (a + 1) % 4
        old = self._pos
        self._pos = move(self.desc, old, direction)
        self._steps += 1
        cell = self._flat[self._pos]
        success = cell == "G"
        terminated = cell in "HG"
        # the step counter is not in the observation: hitting it is truncation
        truncated = not terminated and self._steps >= self.max_steps
        info = make_info(
            True,
            self._pos != old,
            success,
            slipped=direction != a,
            fell_in_hole=cell == "H",
            steps=self._steps,
        )
        return self.render("text"), float(success), terminated, truncated, info

    # -- views --------------------------------------------------------------------------------
    @property
    def action_names(self) -> list[str]:
        return list(ACTION_NAMES)

    @property
    def position(self) -> tuple[int, int]:
        """``(row, col)`` of the agent."""
        return divmod(self._pos, self.cols)

    def snapshot(self) -> object:
        return (self.desc, self._pos, self._steps, self.done, self.success)

    def state_key(self) -> str:
        """The grid text whatever ``observation_format`` is, so that the training /
        validation split of initial states is the same in every format."""
        return self.grid_text()

    # -- facts (ragen.envs.facts) -----------------------------------------------------------
    def state_facts(self) -> list[Fact]:
        """``player (r,c); goal (r,c)`` then the holes among the player's up/down/left/right
        neighbours inside the map, sorted by ``(row, col)``: what the agent must see to
        choose a safe move. A player in a hole is on that hole's cell (the hole itself is
        not listed: it is not a neighbour); on the goal, ``player`` and ``goal`` share a cell."""
        r, c = self.position
        holes = sorted(
            (r + dr, c + dc)
            for dr, dc in _MOVES
            if 0 <= r + dr < self.rows
            and 0 <= c + dc < self.cols
            and self.desc[r + dr][c + dc] == "H"
        )
        return [Fact("player", r, c), Fact("goal", *self._goal)] + [
            Fact("hole", hr, hc) for hr, hc in holes
        ]

    def predict_facts(self, actions: list[str]) -> list[Fact]:
        """``[player (r,c)]`` after the INTENDED moves of ``actions`` from the current cell.

        Each move is applied as if ``p = 1`` (no slipping), stopping at the first hole or
        the goal (the episode would end there); unreadable actions are no-ops, as in
        ``step`` (aliases ``l d r u``, any case). On slippery ice the prediction is thus
        scored against the intended outcome, not the sampled one: the agent cannot know
        the slip. The env, its step count and its RNG are untouched; the step limit is
        ignored (it is not observed). After the end of an episode nothing moves.
        """
        pos = self._pos
        if not self.done:
            for action in actions:
                if self._flat[pos] in "HG":
                    break
                a = ACTION_ALIASES.get(normalize_action(action))
                if a is not None:
                    pos = move(self.desc, pos, a)
        return [Fact("player", *divmod(pos, self.cols))]

    def transition_table(self) -> dict[int, dict[int, list[tuple[float, int]]]]:
        """``{state: {action: [(prob, next_state)]}}`` for non-terminal states (compare
        with gymnasium's ``env.unwrapped.P``)."""
        n = self.rows * self.cols
        return {
            s: {a: transitions(self.desc, s, a, self.p) for a in range(4)}
            for s in range(n)
            if self._flat[s] not in "HG"
        }

    @property
    def instructions(self) -> str:
        s = SYMBOLS
        if self.p >= 1.0:
            ice = "The ice is not slippery: you always move where you intend."
        else:
            ice = (
                f"The ice is slippery: you move in the intended direction with probability "
                f"{self.p:.2f}; otherwise you slide to one of the two perpendicular directions "
                f"(probability {(1 - self.p) / 2:.2f} each)."
            )
        # the coord format shows no symbols, so its instructions have no symbol legend
        symbols = (
            ""
            if self.observation_format == "coord"
            else f"Symbols: {s['player']} you, {s['frozen']} frozen ice, {s['hole']} hole, "
            f"{s['goal']} goal, {s['player_in_hole']} you in a hole, "
            f"{s['player_on_goal']} you on the goal.\n"
        )
        return (
            "You are walking on a frozen lake. Reach the goal without falling into a hole.\n"
            f"{ice} Moving into the edge of the map leaves you in place.\n"
            f"{symbols}"
            f"Reward: +1 for reaching the goal; falling into a hole ends the episode. "
            f"At most {self.max_steps} actions.\n"
            f"{COORDINATE_CONVENTION}\n"
            f"{self._coord_legend()}"
            "Actions: left, down, right, up (also l, d, r, u).\n"
            "Answer with one or more of: left, down, right, up (e.g. 'down || right')."
        )

    def _coord_legend(self) -> str:
        """How to read the coord observation (empty for the grid format)."""
        return coord_legend(
            self.observation_format,
            "the map as 'kind (row,col)' facts separated by ';': "
            "size (rows,cols) is the size of the map; player is you; goal is the goal; "
            "hole lists every hole. Every other cell is frozen ice. You are in a hole or on "
            "the goal when your cell is also listed as one.",
        )

    def grid_text(self) -> str:
        """The symbol grid (the ``"grid"`` observation)."""
        cell = {"H": SYMBOLS["hole"], "G": SYMBOLS["goal"]}
        chars = [cell.get(ch, SYMBOLS["frozen"]) for ch in self._flat]
        agent = {"H": SYMBOLS["player_in_hole"], "G": SYMBOLS["player_on_goal"]}
        chars[self._pos] = agent.get(self._flat[self._pos], SYMBOLS["player"])
        c = self.cols
        return "\n".join("".join(chars[r * c : (r + 1) * c]) for r in range(self.rows))

    def coord_text(self) -> str:
        """The ``"coord"`` observation: ``size (rows,cols); player (r,c); goal (r,c)``
        then every hole in ``(row, col)`` order. It determines the state: the map is the
        size, goal and holes (everything else is ice) and the player is the only
        dynamic object. The start cell is not listed: it plays no further role."""
        facts = [Fact("size", self.rows, self.cols), Fact("player", *self.position)]
        facts.append(Fact("goal", *self._goal))
        facts.extend(Fact("hole", r, c) for r, c in self._holes)
        return format_facts(facts)

    def render(self, mode: str = "text") -> str | np.ndarray:
        if mode == "text":
            if self.observation_format == "grid":
                return self.grid_text()
            return compose_observation(self.observation_format, self.grid_text(), self.coord_text())
        if mode == "rgb":
            codes = [{"H": 1, "G": 2}.get(ch, 0) for ch in self._flat]
            codes[self._pos] += 3
            return compose(codes, self.cols, _tiles(self.tile_size))
        raise self._unsupported_mode(mode, ("text", "rgb"))

    # -- reference policies -------------------------------------------------------------------
    def oracle_action(self) -> str | None:
        """The oracle's action at the current cell (``oracle_gamma``: the discounted
        chance of reaching the goal, or at 1 the chance of ever reaching it)."""
        if self.done:
            return None
        return ACTION_NAMES[oracle_policy(self.desc, self.p, self.oracle_gamma)[self._pos]]

    progress_potential_meaning = (
        "the solver's discounted (gamma 0.9) chance of reaching the goal from here"
    )

    def progress_potential(self) -> float:
        """``Phi(s) = E[0.9^T 1(goal)]`` under the oracle's policy from the current cell
        (:func:`discounted_success`): 1 at the goal, 0 in a hole, and higher the sooner
        the goal can safely be reached. The undiscounted chance would not do: on most
        slippery maps a cautious policy reaches the goal with probability 1 from almost
        every cell, so it would say nothing about getting closer within the turn budget."""
        return discounted_success(self.desc, self.p, oracle_gamma=self.oracle_gamma)[self._pos]

    difficulty_meaning = (
        "1 - the solver's discounted (gamma 0.9) chance of reaching the goal from the start"
    )

    def difficulty(self) -> float | None:
        """``1 - Phi(start)``: 0 for a goal next to the start on a safe lake, towards 1 the
        farther and more dangerous the way (:meth:`progress_potential`)."""
        return 1.0 - self.progress_potential()

    def optimal_success_probability(self, from_current: bool = False) -> float:
        """Probability that the best policy ever reaches the goal (no step limit:
        :func:`solve_lake`, whatever ``oracle_gamma`` is), from the start cell (default) or
        the current cell."""
        _, values = solve_lake(self.desc, self.p)
        return values[self._pos if from_current else self._start]


def _tiles(size: int) -> np.ndarray:
    """Tiles: frozen, hole, goal, then the same three with the player on them."""
    if size not in _TILE_CACHE:
        frozen = with_border(fill(size, (200, 230, 250)), (170, 205, 230))
        hole = with_border(fill(size, (20, 40, 90)), (170, 205, 230))
        goal = with_square(frozen, (240, 190, 40), 0.2)
        red = (210, 40, 40)
        _TILE_CACHE[size] = np.stack(
            [
                frozen,
                hole,
                goal,
                with_disc(frozen, red),
                with_disc(hole, (120, 20, 20)),
                with_disc(goal, red, 0.25),
            ]
        )
    return _TILE_CACHE[size]
