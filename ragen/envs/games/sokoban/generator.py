"""Random Sokoban rooms that are solvable by construction.

Two phases (the scheme of the RAGEN paper's environment, written from scratch):

1. **Topology.** A random walk through the interior carves floor with small
   brushes (a cell, a bar of three, a 2x2 block, an L); the border stays wall.
2. **Reverse play.** Boxes start on their targets (the solved state). The player
   then walks randomly and sometimes *pulls* the box behind it. Every pull is the
   exact inverse of a legal push, so replaying the walk backwards solves the room:
   every generated room is solvable. The walk keeps the most scrambled state seen,
   scored by ``box_switches * total_box_displacement`` (favouring rooms where several
   boxes moved far).

Everything is pure Python on flat indices with precomputed offsets; one 6x6 room
costs a few tens of microseconds. Generation depends only on the ``random.Random``
passed in, so a seed gives the same room in every process.
"""

from __future__ import annotations

import random

from ragen.errors import EnvOptionError

from .room import Room, direction_offsets

# Brushes carved at each walk step, as (row, col) offsets from the walker.
_BRUSHES: tuple[tuple[tuple[int, int], ...], ...] = (
    ((0, 0),),
    ((0, -1), (0, 0), (0, 1)),  # horizontal bar
    ((-1, 0), (0, 0), (1, 0)),  # vertical bar
    ((0, 0), (0, 1), (1, 0), (1, 1)),  # 2x2 block
    ((0, 0), (0, 1), (1, 0)),  # L
    ((0, -1), (0, 0), (1, 0)),  # mirrored L
)
_STEPS = ((-1, 0), (1, 0), (0, -1), (0, 1))


#: the longest side of a room: a 100 x 100 room is 10,100 characters of observation, past
#: what a policy's context holds over several turns; a 30000 x 30000 one took minutes to
#: generate (and 10^6 x 10^6 a MemoryError) before anything said so
MAX_ROOM_SIDE = 100


def check_room_config(height: int, width: int, num_boxes: int) -> None:
    """Raise ``ValueError`` naming the parameter when no room can exist."""
    if height < 3 or width < 3:
        raise EnvOptionError(f"dim_room=({height}, {width}) is too small; each side must be >= 3")
    if height > MAX_ROOM_SIDE or width > MAX_ROOM_SIDE:
        raise EnvOptionError(
            f"dim_room=({height}, {width}) is too large; each side must be <= {MAX_ROOM_SIDE} "
            "(the room is the observation, one character a cell). Fix: e.g. dim_room=[8, 8]"
        )
    if num_boxes < 1:
        raise EnvOptionError(f"num_boxes={num_boxes} must be >= 1")
    interior = (height - 2) * (width - 2)
    # boxes, their targets overlap in the solved state, plus one cell for the player and one
    # free cell so that at least one pull is possible
    if num_boxes + 2 > interior:
        raise EnvOptionError(
            f"num_boxes={num_boxes} does not fit in dim_room=({height}, {width}): the interior "
            f"has {interior} cells and needs at least num_boxes + 2; lower num_boxes or enlarge "
            "dim_room"
        )


def carve_topology(
    rng: random.Random, height: int, width: int, walk_steps: int, p_change_direction: float
) -> list[bool]:
    """Random-walk floor plan: ``height * width`` booleans, border always wall."""
    floor = [False] * (height * width)
    uniform = rng.random  # int(uniform() * k) is several times faster than randrange(k)
    n_brushes = len(_BRUSHES)
    r = rng.randrange(1, height - 1)
    c = rng.randrange(1, width - 1)
    dr, dc = _STEPS[int(uniform() * 4)]
    for _ in range(walk_steps):
        if uniform() < p_change_direction:
            dr, dc = _STEPS[int(uniform() * 4)]
        # clamp to the interior: the walker slides along a wall instead of leaving
        r = min(max(r + dr, 1), height - 2)
        c = min(max(c + dc, 1), width - 2)
        for br, bc in _BRUSHES[int(uniform() * n_brushes)]:
            rr, cc = r + br, c + bc
            if 0 < rr < height - 1 and 0 < cc < width - 1:
                floor[rr * width + cc] = True
    return floor


def reverse_play(
    rng: random.Random,
    floor: list[bool],
    width: int,
    targets: list[int],
    player: int,
    search_depth: int,
    pull_probability: float,
) -> tuple[int, int, frozenset[int]] | None:
    """Scramble the solved state by a random walk with pulls.

    Returns the best ``(score, player, boxes)`` seen in ``search_depth`` steps, or None
    when no box ever left its target.
    """
    offsets = direction_offsets(width)
    box_at: dict[int, int] = {t: k for k, t in enumerate(targets)}  # cell -> box id
    displacement = 0  # sum of Manhattan distances box -> its own origin target
    switches = 0  # how often the pulled box changed (rewards moving several boxes)
    last_pulled = -1
    best_score = 0
    best: tuple[int, int, frozenset[int]] | None = None
    uniform = rng.random
    for _ in range(search_depth):
        d = offsets[int(uniform() * 4)]
        nxt = player + d
        if not floor[nxt] or nxt in box_at:
            continue
        behind = player - d
        if behind in box_at and uniform() < pull_probability:
            k = box_at.pop(behind)
            box_at[player] = k
            origin = targets[k]
            displacement += _manhattan(player, origin, width) - _manhattan(behind, origin, width)
            if k != last_pulled:
                switches += 1
                last_pulled = k
        player = nxt
        score = switches * displacement
        if score > best_score:
            best_score = score
            best = (score, player, frozenset(box_at))
    return best


def _reachable(floor: list[bool], width: int, start: int, boxes: frozenset[int]) -> list[int]:
    """Cells the player walks to from ``start`` without pushing, in a seed-stable order."""
    offsets = direction_offsets(width)
    seen = {start}
    order = [start]
    for cell in order:  # BFS; ``order`` grows while iterating
        for d in offsets:
            nxt = cell + d
            if floor[nxt] and nxt not in boxes and nxt not in seen:
                seen.add(nxt)
                order.append(nxt)
    return order


def _manhattan(a: int, b: int, width: int) -> int:
    ra, ca = divmod(a, width)
    rb, cb = divmod(b, width)
    return abs(ra - rb) + abs(ca - cb)


def generate_room(
    rng: random.Random,
    dim_room: tuple[int, int] = (6, 6),
    num_boxes: int = 1,
    *,
    walk_steps: int | None = None,
    p_change_direction: float = 0.35,
    search_depth: int = 100,
    pull_probability: float = 0.8,
    reverse_walks: int = 3,
    max_tries: int = 200,
) -> Room:
    """Generate one solvable room from ``rng``.

    Args:
        rng: the only source of randomness (seed it for reproducibility).
        dim_room: ``(height, width)`` including the wall border.
        num_boxes: boxes (= targets).
        walk_steps: topology random-walk length; default ``1.7 * (height + width)``.
        p_change_direction: chance per walk step to turn.
        search_depth: reverse-play walk length (longer = more scrambled, harder rooms).
        pull_probability: chance to pull the box behind the player when walking away.
        reverse_walks: independent reverse walks per topology; the best-scoring is kept.
        max_tries: topologies tried before giving up with ``ValueError``.
    """
    height, width = (int(v) for v in dim_room)
    check_room_config(height, width, num_boxes)
    if walk_steps is None:
        walk_steps = int(1.7 * (height + width))
    for _ in range(max_tries):
        floor = carve_topology(rng, height, width, walk_steps, p_change_direction)
        cells = [i for i, f in enumerate(floor) if f]
        if len(cells) < num_boxes + 2:
            continue
        picked = rng.sample(cells, num_boxes + 1)
        targets, player = picked[:num_boxes], picked[num_boxes]
        best = None
        for _ in range(reverse_walks):
            state = reverse_play(rng, floor, width, targets, player, search_depth, pull_probability)
            if state is not None and (best is None or state[0] > best[0]):
                best = state
        if best is not None:
            _, end_player, boxes = best
            # The walk's best state always directly follows a pull, with the player in the
            # pushing spot, which makes the first move trivial. Any cell the player reaches
            # from there without touching a box is an equally solvable start: pick one.
            player = rng.choice(_reachable(floor, width, end_player, boxes))
            return Room(height, width, tuple(floor), frozenset(targets), boxes, player)
    raise EnvOptionError(
        f"no solvable room with num_boxes={num_boxes} in dim_room=({height}, {width}) after "
        f"{max_tries} topologies; lower num_boxes, enlarge dim_room or raise walk_steps"
    )
