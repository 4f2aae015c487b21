"""Optimal Sokoban solver: breadth-first search over (player, boxes) states.

BFS over single moves returns a plan with the fewest moves (what the env's
-0.1-per-step reward prices), which also makes it the expert for SFT data and
the reference "optimal solution length".

Speed comes from:

* a state packed in one Python int: ``box_bits * n_cells + player`` where
  ``box_bits`` has bit ``i`` set when a box stands on cell ``i``;
* **dead squares**: cells from which a box can never reach any target (computed
  once per layout by pulling a box backwards from every target) are never pushed
  into;
* **freeze deadlocks**: a push that completes a 2x2 block of walls/boxes holding a
  box off target is pruned (no box in such a block can ever move again).
"""

from __future__ import annotations

from collections import deque

from .room import ACTION_NAMES, Room, direction_offsets

#: default cap on expanded states; beyond it the solver gives up (returns None)
DEFAULT_MAX_STATES = 300_000


def live_squares(floor: tuple[bool, ...] | list[bool], width: int, targets) -> set[int]:
    """Cells from which a lone box can still be pushed onto some target.

    Reverse reasoning: a box on a live cell ``y`` can have come from ``y - d`` when the
    player could stand at ``y - 2d`` to push it, so ``y - d`` is live too.
    """
    offsets = direction_offsets(width)
    live = set(targets)
    frontier = list(targets)
    while frontier:
        y = frontier.pop()
        for d in offsets:
            x, p = y - d, y - 2 * d
            if x not in live and floor[x] and 0 <= p < len(floor) and floor[p]:
                live.add(x)
                frontier.append(x)
    return live


def solve_room(room: Room, max_states: int = DEFAULT_MAX_STATES) -> list[str] | None:
    """Fewest-moves plan from ``room``'s current state, as action names.

    Returns ``[]`` when already solved and ``None`` when the room is unsolvable or the
    search expanded more than ``max_states`` states.
    """
    path = _search(room, max_states)
    return None if path is None else [ACTION_NAMES[a] for a, _ in path]


def solve_path(room: Room, max_states: int = DEFAULT_MAX_STATES) -> list[tuple[int, int]] | None:
    """Like :func:`solve_room` but returns ``(action_id, packed_state_before)`` pairs."""
    return _search(room, max_states)


def pack(room: Room, player: int, boxes) -> int:
    """The packed state key used by the solver (and by the env's oracle cache)."""
    bits = 0
    for b in boxes:
        bits |= 1 << b
    return bits * (room.height * room.width) + player


def _search(room: Room, max_states: int) -> list[tuple[int, int]] | None:
    n = room.height * room.width
    floor = room.floor
    offsets = direction_offsets(room.width)
    width = room.width
    target_bits = 0
    for t in room.targets:
        target_bits |= 1 << t
    live = live_squares(floor, width, room.targets)
    pushable = [floor[i] and i in live for i in range(n)]
    wall = [not f for f in floor]

    start = pack(room, room.player, room.boxes)
    if start // n == target_bits:
        return []
    # parent[key] = (previous key, action id); the start maps to None
    parent: dict[int, tuple[int, int] | None] = {start: None}
    queue = deque([start])
    while queue:
        key = queue.popleft()
        bits, player = divmod(key, n)
        for a in range(4):
            d = offsets[a]
            nxt = player + d
            if wall[nxt]:
                continue
            if bits >> nxt & 1:
                dest = nxt + d
                if not pushable[dest] or bits >> dest & 1:
                    continue
                new_bits = bits ^ (1 << nxt) ^ (1 << dest)
                if _frozen(dest, new_bits, target_bits, wall, width):
                    continue
                child = new_bits * n + nxt
                if child in parent:
                    continue
                parent[child] = (key, a)
                if new_bits == target_bits:
                    return _unwind(parent, child)
            else:
                child = bits * n + nxt
                if child in parent:
                    continue
                parent[child] = (key, a)
            queue.append(child)
        if len(parent) > max_states:
            return None
    return None


def _frozen(cell: int, bits: int, target_bits: int, wall: list[bool], width: int) -> bool:
    """True when the box just pushed to ``cell`` closes a 2x2 block of walls and boxes
    holding at least one box off target: no box of that block can ever move again."""
    # the four 2x2 blocks containing ``cell``, each given by its other three cells
    for dr, dc in ((-1, -1), (-1, 1), (1, -1), (1, 1)):
        a = cell + dc  # horizontal neighbour
        b = cell + dr * width  # vertical neighbour
        c = b + dc  # diagonal neighbour
        if (wall[a] or bits >> a & 1) and (wall[b] or bits >> b & 1) and (wall[c] or bits >> c & 1):
            block_boxes = bits & ((1 << cell) | (1 << a) | (1 << b) | (1 << c))
            if block_boxes & ~target_bits:
                return True
    return False


def _unwind(parent: dict[int, tuple[int, int] | None], key: int) -> list[tuple[int, int]]:
    path: list[tuple[int, int]] = []
    step = parent[key]
    while step is not None:
        prev, a = step
        path.append((a, prev))
        step = parent[prev]
    path.reverse()
    return path
