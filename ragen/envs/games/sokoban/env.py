"""The Sokoban environment: push every box onto a target.

Rewards (the RAGEN paper's): -0.1 per step, +1 when a box is pushed onto a target,
-1 when a box is pushed off one, +10 when the room is solved (the episode ends).
Rooms are generated from the seed (solvable by construction, see ``generator``) or
taken from a level file (level ``seed mod n``).

Observation formats (``observation_format``, see ``ragen.envs.facts``)::

    grid     coord
    #####    size (5,5); player (1,1); box (2,2); target (3,3); wall (2,1)
    #P__#
    ##X_#    (``grid_coord``: the grid, a newline, then the coord text)
    #__O#
    #####
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import numpy as np

from ragen.errors import EnvOptionError

from ...base import Env, StepResult, derive_seed, make_info, normalize_action
from ...facts import (
    COORDINATE_CONVENTION,
    Fact,
    check_observation_format,
    compose_observation,
    coord_legend,
    format_facts,
)
from ..rgb import compose, fill, with_border, with_disc, with_ring, with_square
from .generator import check_room_config, generate_room
from .level_files import load_levels
from .room import ACTION_ALIASES, ACTION_NAMES, Room, direction_offsets
from .solver import DEFAULT_MAX_STATES, pack, solve_path, solve_room

STEP_REWARD = -0.1
BOX_ON_REWARD = 1.0
BOX_OFF_REWARD = -1.0
SOLVED_REWARD = 10.0

#: named symbol vocabularies for the text observation
SYMBOL_SETS: dict[str, dict[str, str]] = {
    # the RAGEN paper's grid vocabulary
    "ragen": {
        "wall": "#",
        "floor": "_",
        "target": "O",
        "box": "X",
        "box_on_target": "√",
        "player": "P",
        "player_on_target": "S",
    },
    # an alternative vocabulary (the paper's "different symbols" generalization test)
    "letters": {
        "wall": "W",
        "floor": ".",
        "target": "T",
        "box": "B",
        "box_on_target": "D",
        "player": "A",
        "player_on_target": "a",
    },
}
_SYMBOL_KEYS = tuple(SYMBOL_SETS["ragen"])
_LEGEND_TEXT = {
    "wall": "wall",
    "floor": "empty floor",
    "target": "target",
    "box": "box",
    "box_on_target": "box on a target",
    "player": "you (the player)",
    "player_on_target": "you standing on a target",
}

# rgb tile codes, in the order of _tiles()
_WALL, _FLOOR, _TARGET, _BOX, _BOX_ON, _PLAYER, _PLAYER_ON = range(7)
_TILE_CACHE: dict[int, np.ndarray] = {}
_MIN_LENGTH_TRIES = 200


def _resolve_symbols(symbols: str | dict[str, str]) -> dict[str, str]:
    if isinstance(symbols, str):
        if symbols not in SYMBOL_SETS:
            raise EnvOptionError(
                f"unknown symbols={symbols!r}; use one of {', '.join(SYMBOL_SETS)} or a dict "
                f"with keys {', '.join(_SYMBOL_KEYS)}"
            )
        return dict(SYMBOL_SETS[symbols])
    if not isinstance(symbols, dict):
        raise TypeError(f"symbols must be a name or a dict, got {type(symbols).__name__}")
    missing = [k for k in _SYMBOL_KEYS if k not in symbols]
    extra = [k for k in symbols if k not in _SYMBOL_KEYS]
    if missing or extra:
        raise EnvOptionError(
            f"symbols dict needs exactly the keys {', '.join(_SYMBOL_KEYS)} "
            f"(missing: {missing or 'none'}, unknown: {extra or 'none'})"
        )
    values = [str(v) for v in symbols.values()]
    if len(set(values)) != len(values) or any(len(v) != 1 for v in values):
        raise EnvOptionError("symbols must be 7 distinct single characters")
    return {k: str(symbols[k]) for k in _SYMBOL_KEYS}


def _dim_room(value: Any) -> tuple[int, int]:
    """``dim_room`` as ``(height, width)``; a one-line error for anything else
    (``dim_room=abc`` from a command line, a single number, three numbers)."""
    if isinstance(value, (list, tuple)) and len(value) == 2:
        try:
            if all(float(v) == int(v) for v in value):
                return int(value[0]), int(value[1])
        except (TypeError, ValueError):
            pass
    raise EnvOptionError(
        f"dim_room must be two whole numbers (height, width), got {value!r}. Fix: e.g. "
        "dim_room=[6, 6]"
    )


class SokobanEnv(Env):
    """Sokoban on a generated or loaded room.

    Config:
        dim_room: ``(height, width)`` of generated rooms, border walls included.
        num_boxes: boxes (= targets) in generated rooms.
        max_steps: the episode is truncated (``truncated=True``) after this many steps
            unsolved: the observation does not show the step count.
        search_depth: reverse-play walk length used by the generator (harder rooms when larger).
        walk_steps: topology random-walk length (default ``1.7 * (height + width)``).
        p_change_direction: turn probability of the topology walk.
        pull_probability: chance the reverse player pulls a box it walks away from.
        reverse_walks: reverse walks tried per room; the most scrambled is kept.
        min_solution_length: regenerate (deterministically) until the optimal plan has at
            least this many moves; 0 accepts every room (a curriculum knob).
        symbols: ``"ragen"`` (default), ``"letters"`` or a dict of the 7 symbols.
        levels: a level file (path or shipped stem, e.g. ``"handmade"``) or a list of
            ``Room``; ``reset(seed)`` then plays level ``seed mod n`` instead of generating.
        solver_max_states: search limit of the BFS solver behind ``oracle_action``.
        tile_size: pixel size of one cell in ``render("rgb")``.
        observation_format: ``"grid"`` (default, the symbol grid), ``"coord"`` (the facts
            ``size (rows,cols); player (r,c); box ...; target ...; wall ...``, which
            determine the state; see :meth:`coord_text`) or ``"grid_coord"`` (grid,
            newline, coord). The coord text uses words whatever ``symbols`` is.

    Facts (``ragen.envs.facts``): ``state_facts()`` is the player, the boxes and the
    targets; ``predict_facts(actions)`` is the player and the boxes after the actions.
    """

    fact_kinds = ("player", "box", "target")
    prediction_kinds = ("player", "box")
    #: kinds of the coord observation (``size (rows,cols)`` is the room's size, not a cell)
    coord_kinds = ("size", "player", "box", "target", "wall")

    description = "Sokoban: push every box onto a target (6x6 room, 1 box)"

    def __init__(
        self,
        dim_room: tuple[int, int] | list[int] = (6, 6),
        num_boxes: int = 1,
        max_steps: int = 100,
        search_depth: int = 100,
        walk_steps: int | None = None,
        p_change_direction: float = 0.35,
        pull_probability: float = 0.8,
        reverse_walks: int = 3,
        min_solution_length: int = 0,
        symbols: str | dict[str, str] = "ragen",
        levels: str | Path | list[Room] | None = None,
        solver_max_states: int = DEFAULT_MAX_STATES,
        tile_size: int = 16,
        observation_format: str = "grid",
    ) -> None:
        super().__init__()
        self.observation_format = check_observation_format(observation_format)
        self.dim_room = _dim_room(dim_room)
        self.num_boxes = int(num_boxes)
        if max_steps < 1:
            raise EnvOptionError(f"max_steps={max_steps} must be >= 1")
        if search_depth < 1:
            raise EnvOptionError(f"search_depth={search_depth} must be >= 1")
        if not 0.0 <= p_change_direction <= 1.0:
            raise EnvOptionError(f"p_change_direction={p_change_direction} must be in [0, 1]")
        if not 0.0 < pull_probability <= 1.0:
            raise EnvOptionError(f"pull_probability={pull_probability} must be in (0, 1]")
        if reverse_walks < 1:
            raise EnvOptionError(f"reverse_walks={reverse_walks} must be >= 1")
        if min_solution_length < 0:
            raise EnvOptionError(f"min_solution_length={min_solution_length} must be >= 0")
        if tile_size < 4:
            raise EnvOptionError(f"tile_size={tile_size} must be >= 4")
        self.max_steps = int(max_steps)
        self.generator_config: dict[str, Any] = {
            "walk_steps": walk_steps,
            "p_change_direction": float(p_change_direction),
            "search_depth": int(search_depth),
            "pull_probability": float(pull_probability),
            "reverse_walks": int(reverse_walks),
        }
        self.symbols = _resolve_symbols(symbols)
        self.solver_max_states = int(solver_max_states)
        self.min_solution_length = int(min_solution_length)
        self.tile_size = int(tile_size)
        if levels is None:
            check_room_config(*self.dim_room, self.num_boxes)
            self.levels: list[Room] | None = None
        elif isinstance(levels, (str, Path)):
            self.levels = load_levels(levels)
        else:
            self.levels = list(levels)
            if not self.levels or not all(isinstance(r, Room) for r in self.levels):
                raise TypeError("levels must be a level-file path or a non-empty list of Room")
        # episode state, filled by _reset
        self._start: Room | None = None
        self._oracle: dict[int, int] = {}  # packed state -> next action id on an optimal plan
        self._moves_left: dict[int, int | None] = {}  # packed state -> optimal moves (None: dead)
        self._set_room(self._initial_room(0))

    # -- episode --------------------------------------------------------------------------
    def _initial_room(self, seed: int) -> Room:
        if self.levels is not None:
            return self.levels[seed % len(self.levels)]
        rng = random.Random(derive_seed("sokoban-room", seed))
        for _ in range(_MIN_LENGTH_TRIES):
            room = generate_room(rng, self.dim_room, self.num_boxes, **self.generator_config)
            if self.min_solution_length <= 1:  # every generated room needs >= 1 move
                return room
            plan = solve_path(room, self.solver_max_states)
            if plan is not None and len(plan) >= self.min_solution_length:
                return room
        raise EnvOptionError(
            f"no room with min_solution_length={self.min_solution_length} found in "
            f"{_MIN_LENGTH_TRIES} tries for dim_room={self.dim_room}, num_boxes={self.num_boxes}; "
            "lower min_solution_length or raise search_depth"
        )

    def _set_room(self, room: Room) -> None:
        self._start = room
        self.height, self.width = room.height, room.width
        self._floor = room.floor
        self._targets = room.targets
        self._boxes = set(room.boxes)
        self._player = room.player
        self._offsets = direction_offsets(room.width)
        self._steps = 0
        # the part of the text view that never changes: walls, floor, targets
        sym = self.symbols
        self._static_chars = [
            sym["wall"] if not f else sym["target"] if i in room.targets else sym["floor"]
            for i, f in enumerate(room.floor)
        ]
        # the part of the coord view that never changes: targets, then the walls inside
        # the border. The border is always wall (a Room invariant), so listing it would
        # only lengthen the text (20 of a 6x6 room's cells); the size fact locates it.
        w, h = room.width, room.height
        self._static_facts = [Fact("target", *room.cell(i)) for i in sorted(room.targets)] + [
            Fact("wall", *room.cell(i))
            for i, f in enumerate(room.floor)
            if not f and 0 < i // w < h - 1 and 0 < i % w < w - 1
        ]

    def _reset(self, seed: int) -> None:
        room = self._initial_room(seed)
        if room is not self._start:
            self._oracle = {}
            self._moves_left = {}
        self._set_room(room)

    def _step(self, action: str) -> StepResult:
        name = ACTION_ALIASES.get(action)
        if name is None:
            return self.render("text"), 0.0, False, False, make_info(False, False, False)
        d = self._offsets[ACTION_NAMES.index(name)]
        self._steps += 1
        reward = STEP_REWARD
        nxt = self._player + d
        effective = False
        if self._floor[nxt]:
            if nxt in self._boxes:
                dest = nxt + d
                if self._floor[dest] and dest not in self._boxes:
                    self._boxes.remove(nxt)
                    self._boxes.add(dest)
                    reward += (dest in self._targets) * BOX_ON_REWARD
                    reward += (nxt in self._targets) * BOX_OFF_REWARD
                    self._player = nxt
                    effective = True
            else:
                self._player = nxt
                effective = True
        solved = self._boxes == self._targets
        if solved:
            reward += SOLVED_REWARD
        # the step counter is not in the observation: hitting it is truncation
        truncated = not solved and self._steps >= self.max_steps
        info = make_info(
            True,
            effective,
            solved,
            boxes_on_target=len(self._boxes & self._targets),
            steps=self._steps,
        )
        return self.render("text"), reward, solved, truncated, info

    # -- views ------------------------------------------------------------------------------
    @property
    def room(self) -> Room:
        """The current state as an immutable ``Room`` (what the solver plans from)."""
        if self._start is None:
            raise RuntimeError("the Sokoban env has no room yet; call reset(seed) first")
        return self._start.with_state(self._player, frozenset(self._boxes))

    @property
    def action_names(self) -> list[str]:
        return list(ACTION_NAMES)

    def snapshot(self) -> object:
        return (self._player, frozenset(self._boxes), self._steps, self.done, self.success)

    def state_key(self) -> str:
        """The grid text whatever ``observation_format`` is, so that the training /
        validation split of initial states is the same in every format."""
        return self.grid_text()

    # -- facts (ragen.envs.facts) -----------------------------------------------------------
    def _cell(self, index: int) -> tuple[int, int]:
        return divmod(index, self.width)

    def _dynamic_facts(self, player: int, boxes: set[int] | frozenset[int]) -> list[Fact]:
        # flat indices are row-major, so sorting them sorts the cells by (row, col)
        return [Fact("player", *self._cell(player))] + [
            Fact("box", *self._cell(b)) for b in sorted(boxes)
        ]

    def state_facts(self) -> list[Fact]:
        """``player (r,c)``, the boxes, then the targets, each group sorted by
        ``(row, col)``. A box on a target is listed as both ``box`` and ``target`` on
        that cell, and so is the player standing on a target (``player`` and ``target``)."""
        return self._dynamic_facts(self._player, self._boxes) + [
            Fact("target", *self._cell(t)) for t in sorted(self._targets)
        ]

    def predict_facts(self, actions: list[str]) -> list[Fact]:
        """``player (r,c)`` and the boxes (sorted) after ``actions`` from the current state.

        The moves follow ``_step``'s rules (a box is pushed when the cell behind it is
        free floor; walls and box pairs block) on a copy of the player and the boxes.
        Unreadable actions are no-ops, as in ``step``; once the room is solved (or the
        episode is over) nothing moves. The step limit is ignored (it is not observed).
        The env is unchanged. Sokoban is deterministic, so this is what stepping gives.
        """
        player, boxes = self._player, set(self._boxes)
        if not self.done:
            for action in actions:
                if boxes == self._targets:
                    break
                name = ACTION_ALIASES.get(normalize_action(action))
                if name is None:
                    continue
                d = self._offsets[ACTION_NAMES.index(name)]
                nxt = player + d
                if not self._floor[nxt]:
                    continue
                if nxt in boxes:
                    dest = nxt + d
                    if not self._floor[dest] or dest in boxes:
                        continue
                    boxes.remove(nxt)
                    boxes.add(dest)
                player = nxt
        return self._dynamic_facts(player, boxes)

    @property
    def instructions(self) -> str:
        s = self.symbols
        legend = "\n".join(f"  {s[k]} : {_LEGEND_TEXT[k]}" for k in _SYMBOL_KEYS)
        # the coord format shows no symbols, so its instructions have no symbol legend
        symbols = "" if self.observation_format == "coord" else f"Symbols:\n{legend}\n"
        return (
            "You are solving Sokoban. You stand in a room and must push every box onto a "
            "target.\n"
            "Rules: you move one cell per action. Walking into a box pushes it one cell in "
            "the same direction if the cell behind it is empty floor or a target; you cannot "
            "pull boxes, push two boxes at once, or walk through walls. A box in a corner can "
            "never be moved again.\n"
            f"{symbols}"
            "Rewards: -0.1 per action, +1 for pushing a box onto a target, -1 for pushing it "
            f"off, +10 when all boxes are on targets. At most {self.max_steps} actions.\n"
            f"{COORDINATE_CONVENTION}\n"
            f"{self._coord_legend()}"
            "Actions: up, down, left, right (also u, d, l, r).\n"
            "Answer with one or more of: up, down, left, right (e.g. 'left || up')."
        )

    def _coord_legend(self) -> str:
        """How to read the coord observation (empty for the grid format)."""
        return coord_legend(
            self.observation_format,
            "the room as 'kind (row,col)' facts separated by ';': "
            "size (rows,cols) is the size of the room, whose outer border is all wall (not "
            "listed); player is you; box and target list the boxes and targets (a box on a "
            "target, or you on a target, is listed as both); wall lists the walls inside "
            "the border. Every other cell is empty floor.",
        )

    def grid_text(self) -> str:
        """The symbol grid (the ``"grid"`` observation), drawn with ``symbols``."""
        chars = list(self._static_chars)
        s = self.symbols
        for b in self._boxes:
            chars[b] = s["box_on_target"] if b in self._targets else s["box"]
        p = self._player
        chars[p] = s["player_on_target"] if p in self._targets else s["player"]
        w = self.width
        return "\n".join("".join(chars[r * w : (r + 1) * w]) for r in range(self.height))

    def coord_text(self) -> str:
        """The ``"coord"`` observation: ``size (rows,cols)``, the player, the boxes, the
        targets and the walls inside the border, each group sorted by ``(row, col)``.

        It determines the state: the border is always wall, every unlisted cell inside
        it is floor, and a box or the player on a target is listed under both kinds. It
        starts with ``size`` and then the ``state_facts()`` text, so an agent that states
        the facts can copy them. Words, not ``symbols``, name the kinds.
        """
        facts = [Fact("size", self.height, self.width)]
        facts += self._dynamic_facts(self._player, self._boxes)
        facts += self._static_facts
        return format_facts(facts)

    def render(self, mode: str = "text") -> str | np.ndarray:
        if mode == "text":
            if self.observation_format == "grid":
                return self.grid_text()
            return compose_observation(self.observation_format, self.grid_text(), self.coord_text())
        if mode == "rgb":
            return self._render_rgb()
        raise self._unsupported_mode(mode, ("text", "rgb"))

    def _render_rgb(self) -> np.ndarray:
        codes = [
            (_TARGET if i in self._targets else _FLOOR) if f else _WALL
            for i, f in enumerate(self._floor)
        ]
        for b in self._boxes:
            codes[b] = _BOX_ON if b in self._targets else _BOX
        codes[self._player] = _PLAYER_ON if self._player in self._targets else _PLAYER
        return compose(codes, self.width, _tiles(self.tile_size))

    # -- reference policies -----------------------------------------------------------------
    def oracle_action(self) -> str | None:
        """Next move of an optimal (fewest-moves) plan from the current state; None when the
        room cannot be solved from here (a deadlock) or the solver hits its limit."""
        if self.done:
            return None
        room = self.room
        key = pack(room, room.player, room.boxes)
        if key not in self._oracle:
            path = solve_path(room, self.solver_max_states)
            if not path:
                return None
            # remember the whole plan: following it hits the cache at every step
            self._oracle.update({state: a for a, state in path})
        return ACTION_NAMES[self._oracle[key]]

    progress_potential_meaning = (
        "-(optimal moves left) / (optimal moves from the start), clipped at -2; a deadlock "
        "(no plan) is -2"
    )

    def progress_potential(self) -> float:
        """``Phi(s) = -min(d(s) / d(s_0), 2)``: the optimal moves left from here ``d(s)``
        over those from the episode's start, so a solved room is 0, the start -1, and a
        deadlock (or a state the solver cannot finish within its limit) -2.

        Normalizing by ``d(s_0)`` makes the shaping of a whole solved episode worth the
        same ``w`` in every room; each optimal move earns ``w / d(s_0)``, a move away
        costs as much, and a push into a deadlock costs up to ``w``."""
        if self._start is None:
            raise RuntimeError("the Sokoban env has no room yet; call reset(seed) first")
        start = self._optimal_moves(self._start)
        left = self._optimal_moves(self.room)
        if not start or left is None:  # an unsolvable level, or a deadlock
            return -2.0
        return -min(left / start, 2.0)

    def _optimal_moves(self, room: Room) -> int | None:
        """Optimal moves from ``room``'s state (None: no plan), memoized per room: the
        rollout asks at every turn, and episodes revisit states."""
        key = pack(room, room.player, room.boxes)
        if key not in self._moves_left:
            path = solve_path(room, self.solver_max_states)
            self._moves_left[key] = None if path is None else len(path)
        return self._moves_left[key]

    difficulty_meaning = "the moves of an optimal solution (BFS)"

    def difficulty(self) -> float | None:
        """The moves of an optimal solution from the current state (None: unsolvable or
        over the solver's limit)."""
        moves = self.optimal_solution_length()
        return None if moves is None else float(moves)

    def optimal_solution_length(self) -> int | None:
        """Moves of an optimal plan from the current state (None if unsolvable / over limit)."""
        path = solve_path(self.room, self.solver_max_states)
        return None if path is None else len(path)


def _tiles(size: int) -> np.ndarray:
    """``(7, size, size, 3)`` tiles: wall, floor, target, box, box on target, player, player on target."""
    if size not in _TILE_CACHE:
        floor = fill(size, (200, 190, 170))
        wall = with_border(fill(size, (110, 60, 40)), (70, 40, 25))
        target = with_ring(floor, (210, 40, 40))
        box = with_border(with_square(floor, (190, 130, 50), 0.12), (120, 80, 30))
        box_on = with_border(with_square(floor, (60, 170, 70), 0.12), (30, 110, 40))
        player = with_disc(floor, (40, 80, 200))
        player_on = with_disc(target, (40, 80, 200), radius=0.28)
        _TILE_CACHE[size] = np.stack([wall, floor, target, box, box_on, player, player_on])
    return _TILE_CACHE[size]


def solve(env: SokobanEnv, max_states: int | None = None) -> list[str] | None:
    """Optimal plan from the env's CURRENT state (action names ``up/down/left/right``).

    ``None`` when no plan exists within the search limit (``env.solver_max_states`` by
    default); ``[]`` when the room is already solved.
    """
    limit = env.solver_max_states if max_states is None else max_states
    return solve_room(env.room, limit)
