"""Read and write Sokoban levels in the standard plain-text format.

Format (one character per cell)::

    #  wall          @  player            $  box            .  goal (target)
       floor         +  player on goal    *  box on goal    -  _  floor (alternatives)

Lines starting with ``;`` are comments. Levels are separated by blank lines or
comments. Cells outside the walls (unreachable from the player) become walls, and
rows are padded to the widest row, so a level loads as a rectangle. A level whose reachable area touches the edge of
the grid is not enclosed and is rejected.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from ragen.errors import EnvOptionError, MissingFileError

from .room import Room, direction_offsets

BUILTIN_DIR = Path(__file__).parent / "levels"
_LEVEL_CHARS = set("#@+$*. -_")


def builtin_level_files() -> list[str]:
    """Names (file stems) of the level files shipped with ragen."""
    return sorted(p.stem for p in BUILTIN_DIR.glob("*.txt"))


def resolve_level_path(levels: str | Path) -> Path:
    """A path to a level file: an existing path, or the stem of a shipped file."""
    path = Path(levels)
    if path.exists():
        return path
    builtin = BUILTIN_DIR / f"{path.stem}.txt"
    if path.suffix in ("", ".txt") and path.parent == Path(".") and builtin.exists():
        return builtin
    raise MissingFileError(
        f"levels file {str(levels)!r} not found. Fix: pass a path or one of the shipped files: "
        f"{', '.join(builtin_level_files())}"
    )


def parse_levels(text: str, source: str = "<string>") -> list[Room]:
    """All levels in ``text`` (standard format) as rooms, in file order."""
    rooms: list[Room] = []
    block: list[str] = []
    start_line = 0
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.rstrip("\r\n")
        if not line.strip() or line.lstrip().startswith(";"):
            if block:
                rooms.append(_parse_block(block, f"{source}:{start_line}"))
                block = []
            continue
        bad = set(line) - _LEVEL_CHARS
        if bad:
            raise EnvOptionError(
                f"{source}:{lineno}: unexpected character(s) {''.join(sorted(bad))!r} in a level "
                "line; use # @ + $ * . and spaces, and start comment lines with ';'"
            )
        if not block:
            start_line = lineno
        block.append(line)
    if block:
        rooms.append(_parse_block(block, f"{source}:{start_line}"))
    return rooms


def load_levels(path: str | Path) -> list[Room]:
    """Levels of a file (a path, or the stem of a shipped file such as ``"handmade"``)."""
    resolved = resolve_level_path(path)
    rooms = parse_levels(resolved.read_text(encoding="utf-8"), str(resolved))
    if not rooms:
        raise EnvOptionError(f"{resolved} holds no levels")
    return rooms


def format_level(room: Room) -> str:
    """One room in the standard format (every non-floor cell written as ``#``)."""
    lines = []
    for r in range(room.height):
        row = []
        for c in range(room.width):
            i = r * room.width + c
            if not room.floor[i]:
                row.append("#")
            elif i == room.player:
                row.append("+" if i in room.targets else "@")
            elif i in room.boxes:
                row.append("*" if i in room.targets else "$")
            else:
                row.append("." if i in room.targets else " ")
        lines.append("".join(row))
    return "\n".join(lines)


def format_levels(rooms: Iterable[Room]) -> str:
    """Several rooms, each preceded by a ``; Level k`` comment."""
    return "".join(f"; Level {k}\n{format_level(r)}\n\n" for k, r in enumerate(rooms, 1))


def save_levels(rooms: Iterable[Room], path: str | Path) -> Path:
    """Write ``rooms`` to ``path`` in the standard format; returns the path."""
    path = Path(path)
    path.write_text(format_levels(rooms), encoding="utf-8")
    return path


def _parse_block(lines: list[str], where: str) -> Room:
    width = max(len(line) for line in lines)
    # pad with a blank ring so "outside" is always connected around the level
    grid = [" " * (width + 2)] + [f" {line.ljust(width)} " for line in lines] + [" " * (width + 2)]
    height, width = len(grid), width + 2
    cells = "".join(grid)
    players = [i for i, ch in enumerate(cells) if ch in "@+"]
    if len(players) != 1:
        raise EnvOptionError(
            f"{where}: a level needs exactly one player (@ or +), found {len(players)}"
        )
    boxes = frozenset(i for i, ch in enumerate(cells) if ch in "$*")
    targets = frozenset(i for i, ch in enumerate(cells) if ch in ".+*")
    if not targets or len(boxes) != len(targets):
        raise EnvOptionError(
            f"{where}: a level needs as many boxes ($ or *) as goals (. + or *), "
            f"found {len(boxes)} boxes and {len(targets)} goals"
        )
    # the inside is what the player reaches walking through anything but walls
    offsets = direction_offsets(width)
    inside = [False] * len(cells)
    stack = [players[0]]
    inside[players[0]] = True
    while stack:
        i = stack.pop()
        r, c = divmod(i, width)
        if r in (0, height - 1) or c in (0, width - 1):
            raise EnvOptionError(
                f"{where}: the level is not enclosed by walls (the player can walk out)"
            )
        for d in offsets:
            j = i + d
            if not inside[j] and cells[j] != "#":
                inside[j] = True
                stack.append(j)
    stray = [i for i in boxes | targets if not inside[i]]
    if stray:
        r, c = divmod(stray[0], width)
        raise EnvOptionError(
            f"{where}: a box or goal at row {r - 1}, col {c - 1} is outside the walls"
        )
    # drop the padding ring: the level's own bounding box remains, outside cells are walls
    new_w = width - 2

    def remap(i: int) -> int:
        r, c = divmod(i, width)
        return (r - 1) * new_w + (c - 1)

    floor = tuple(inside[r * width + c] for r in range(1, height - 1) for c in range(1, width - 1))
    return Room(
        height - 2,
        new_w,
        floor,
        frozenset(map(remap, targets)),
        frozenset(map(remap, boxes)),
        remap(players[0]),
    )
