"""The Sokoban room: an immutable puzzle state on a flat, row-major grid.

Cells are addressed by flat index ``i = row * width + col``; moving one cell in a
direction adds a fixed offset (``-width`` up, ``+width`` down, ``-1`` left, ``+1``
right). Every room keeps its border cells as walls, so adding an offset to a floor
cell never leaves the grid and no bounds checks are needed in the hot loops.
"""

from __future__ import annotations

from dataclasses import dataclass

from ragen.errors import EnvOptionError

#: canonical action names in a fixed order; index = action id
ACTION_NAMES: tuple[str, ...] = ("up", "down", "left", "right")

#: accepted spellings (after lower-casing) -> canonical action name
ACTION_ALIASES: dict[str, str] = {
    "up": "up",
    "u": "up",
    "down": "down",
    "d": "down",
    "left": "left",
    "l": "left",
    "right": "right",
    "r": "right",
}


def direction_offsets(width: int) -> tuple[int, int, int, int]:
    """Flat-index offsets of ``ACTION_NAMES`` (up, down, left, right) for a grid ``width``."""
    return (-width, width, -1, 1)


@dataclass(frozen=True)
class Room:
    """A Sokoban puzzle: static layout (walls, targets) plus dynamic state (player, boxes).

    Attributes:
        height, width: grid size in cells (border included).
        floor: ``height * width`` booleans, True where walkable (not a wall).
        targets: flat indices of the goal squares.
        boxes: flat indices of the boxes, ``len(boxes) == len(targets)``.
        player: flat index of the player.
    """

    height: int
    width: int
    floor: tuple[bool, ...]
    targets: frozenset[int]
    boxes: frozenset[int]
    player: int

    def __post_init__(self) -> None:
        n = self.height * self.width
        if self.height < 3 or self.width < 3:
            raise EnvOptionError(f"room must be at least 3x3, got {self.height}x{self.width}")
        if len(self.floor) != n:
            raise EnvOptionError(f"floor has {len(self.floor)} cells, expected {n}")
        for i in range(n):
            r, c = divmod(i, self.width)
            if self.floor[i] and (r in (0, self.height - 1) or c in (0, self.width - 1)):
                raise EnvOptionError(
                    f"floor cell at row {r}, col {c} lies on the border; "
                    "rooms must be enclosed by walls"
                )
        if not self.targets:
            raise EnvOptionError("room has no targets")
        if len(self.boxes) != len(self.targets):
            raise EnvOptionError(
                f"room has {len(self.boxes)} boxes but {len(self.targets)} targets; they must match"
            )
        for what, cells in (
            ("target", self.targets),
            ("box", self.boxes),
            ("player", [self.player]),
        ):
            for i in cells:
                if not (0 <= i < n and self.floor[i]):
                    raise EnvOptionError(f"{what} at flat index {i} is not on a floor cell")
        if self.player in self.boxes:
            raise EnvOptionError("player and a box share a cell")

    @property
    def solved(self) -> bool:
        return self.boxes == self.targets

    def with_state(self, player: int, boxes: frozenset[int]) -> Room:
        """The same layout with another player position and box set."""
        return Room(self.height, self.width, self.floor, self.targets, frozenset(boxes), player)

    def cell(self, index: int) -> tuple[int, int]:
        """``(row, col)`` of a flat index."""
        return divmod(index, self.width)
