"""Pictures of grid observations, cut from the env's own ``render("rgb")``.

A site can hold 100,000 episodes, too many to replay and encode one PNG per turn. For a
grid env the text observation is the state, one symbol per cell, and ``render("rgb")``
draws one tile per cell. :func:`tile_palette` plays a few episodes of the env (the run's
env config), cuts each frame into tiles and pairs every tile with the symbol of its
cell: ``{symbol: PNG data URI}``. The pages then draw any observation's grid from those
tiles. A symbol drawn two ways (the text does not determine the picture), a frame that
does not split into the text's cells, or an env without ``render("rgb")`` gives no
palette, and the pages show the text only.
"""

from __future__ import annotations

import random
from typing import Any

import numpy as np

from ragen import envs
from ragen.envs.visual import png_bytes
from ragen.envs.visual import png_data_uri as data_uri

__all__ = ["png_bytes", "data_uri", "grid_lines", "tile_palette"]


def grid_lines(text: str) -> list[str] | None:
    """The longest block of consecutive equal-length lines (>= 2) of ``text``: the grid
    part of an observation; None when there is none."""
    lines = text.split("\n")
    best: tuple[int, int] = (0, 0)
    start = 0
    for i in range(1, len(lines) + 1):
        if i == len(lines) or len(lines[i]) != len(lines[start]) or not lines[i]:
            if i - start > best[1] - best[0] and len(lines[start]) > 0:
                best = (start, i)
            start = i
    a, b = best
    return lines[a:b] if b - a >= 2 else None


def _cut(text: str, frame: np.ndarray, tiles: dict[str, bytes]) -> bool:
    """Add the (symbol, tile) pairs of one frame to ``tiles``; False on a conflict."""
    lines = grid_lines(text)
    if lines is None:
        return False
    rows, cols = len(lines), len(lines[0])
    h, w = frame.shape[:2]
    if h % rows or w % cols or h // rows != w // cols:
        return False
    t = h // rows
    for r, line in enumerate(lines):
        for c, ch in enumerate(line):
            tile = frame[r * t : (r + 1) * t, c * t : (c + 1) * t].tobytes()
            if tiles.setdefault(ch, tile) != tile:
                return False
    return True


def tile_palette(
    env_name: str, env_config: dict[str, Any] | None = None, episodes: int = 6, steps: int = 30
) -> dict[str, Any] | None:
    """``{"size": tile pixels, "tiles": {symbol: data URI}}`` for a grid env, else None.

    Plays ``episodes`` short episodes (oracle moves, then random ones) so that most
    symbols (a box on a target, the player on the goal) are seen.
    """
    if not env_name:
        return None
    try:
        env = envs.make(env_name, **dict(env_config or {}))
    except Exception:  # an env the viewer cannot build: text only
        return None
    tiles: dict[str, bytes] = {}
    size = 0
    rng = random.Random(0)
    try:
        for seed in range(episodes):
            text = env.reset(seed)
            for k in range(steps):
                try:
                    frame = np.asarray(env.render("rgb"))
                except Exception:
                    return None
                if frame.ndim != 3 or not _cut(str(text), frame, tiles):
                    return None
                lines = grid_lines(str(text)) or [""]
                size = frame.shape[0] // len(lines)
                if env.done:
                    break
                action = env.oracle_action() if k % 2 == 0 and seed % 2 == 0 else None
                if action is None:
                    try:
                        action = env.random_action(rng)
                    except NotImplementedError:
                        break
                text = env.step(action)[0]
    finally:
        env.close()
    if not tiles or not size:
        return None
    uris = {
        ch: data_uri(np.frombuffer(b, dtype=np.uint8).reshape(size, size, 3))
        for ch, b in tiles.items()
    }
    return {"size": size, "tiles": uris}
