"""Tiny drawing kit for ``render("rgb")`` of grid worlds: coloured tiles, no image assets.

A tile is a ``(T, T, 3)`` uint8 array; a frame is the grid of tiles stacked into an
``(rows*T, cols*T, 3)`` uint8 image. Tiles are composed from a few primitives (fill,
inset square, disc, border) and cached per grid world, so drawing a frame is one
numpy gather and costs microseconds.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

Color = tuple[int, int, int]


def fill(size: int, color: Color) -> np.ndarray:
    """A ``(size, size, 3)`` tile of one colour."""
    tile = np.empty((size, size, 3), dtype=np.uint8)
    tile[:] = color
    return tile


def with_border(tile: np.ndarray, color: Color, width: int = 1) -> np.ndarray:
    """A copy of ``tile`` with a ``width``-pixel frame of ``color``."""
    out = tile.copy()
    out[:width, :] = color
    out[-width:, :] = color
    out[:, :width] = color
    out[:, -width:] = color
    return out


def with_square(tile: np.ndarray, color: Color, margin: float = 0.2) -> np.ndarray:
    """A copy of ``tile`` with a centred square inset by ``margin`` (fraction of the side)."""
    out = tile.copy()
    size = tile.shape[0]
    m = int(round(size * margin))
    out[m : size - m, m : size - m] = color
    return out


def with_disc(tile: np.ndarray, color: Color, radius: float = 0.35) -> np.ndarray:
    """A copy of ``tile`` with a centred disc of ``radius`` (fraction of the side)."""
    out = tile.copy()
    size = tile.shape[0]
    centre = (size - 1) / 2.0
    yy, xx = np.mgrid[0:size, 0:size]
    mask = (yy - centre) ** 2 + (xx - centre) ** 2 <= (radius * size) ** 2
    out[mask] = color
    return out


def with_ring(
    tile: np.ndarray, color: Color, radius: float = 0.35, width: float = 0.1
) -> np.ndarray:
    """A copy of ``tile`` with a centred ring (a target marker)."""
    out = tile.copy()
    size = tile.shape[0]
    centre = (size - 1) / 2.0
    yy, xx = np.mgrid[0:size, 0:size]
    dist = np.sqrt((yy - centre) ** 2 + (xx - centre) ** 2)
    mask = (dist <= radius * size) & (dist >= (radius - width) * size)
    out[mask] = color
    return out


def compose(codes: Sequence[int], cols: int, tiles: np.ndarray) -> np.ndarray:
    """Stack tiles into a frame.

    Args:
        codes: flat row-major tile codes, ``len(codes) == rows * cols``.
        cols: grid width in cells.
        tiles: ``(K, T, T, 3)`` uint8, tile ``k`` drawn where ``codes == k``.

    Returns:
        ``(rows*T, cols*T, 3)`` uint8 image.
    """
    idx = np.asarray(codes, dtype=np.intp)
    rows = idx.size // cols
    t = tiles.shape[1]
    grid = tiles[idx].reshape(rows, cols, t, t, 3)  # (rows, cols, T, T, 3)
    return np.ascontiguousarray(grid.transpose(0, 2, 1, 3, 4).reshape(rows * t, cols * t, 3))
