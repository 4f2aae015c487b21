"""Digits drawn into ``render("rgb")`` frames: a 3x5 pixel font, scaled, no font files.

Used by the number puzzles (Sudoku, 2048). ``draw_text(tile, "128", color)`` writes the
digits centred into a ``(T, T, 3)`` uint8 tile in place; the glyphs are scaled by the
largest integer factor that fits, so a frame stays crisp at any tile size.
"""

from __future__ import annotations

import numpy as np

# 3 columns x 5 rows per digit, '#' = ink
_FONT = {
    "0": ("###", "#.#", "#.#", "#.#", "###"),
    "1": (".#.", "##.", ".#.", ".#.", "###"),
    "2": ("###", "..#", "###", "#..", "###"),
    "3": ("###", "..#", "###", "..#", "###"),
    "4": ("#.#", "#.#", "###", "..#", "..#"),
    "5": ("###", "#..", "###", "..#", "###"),
    "6": ("###", "#..", "###", "#.#", "###"),
    "7": ("###", "..#", "..#", "..#", "..#"),
    "8": ("###", "#.#", "###", "#.#", "###"),
    "9": ("###", "#.#", "###", "..#", "###"),
}
_MASKS = {ch: np.array([[c == "#" for c in row] for row in rows]) for ch, rows in _FONT.items()}


def text_mask(text: str) -> np.ndarray:
    """``(5, 4 * len(text) - 1)`` bool mask of ``text`` (digits only, one blank column
    between glyphs)."""
    if not text or any(ch not in _MASKS for ch in text):
        raise ValueError(f"text_mask draws digits only, got {text!r}")
    gap = np.zeros((5, 1), dtype=bool)
    parts: list[np.ndarray] = []
    for i, ch in enumerate(text):
        if i:
            parts.append(gap)
        parts.append(_MASKS[ch])
    return np.concatenate(parts, axis=1)


def draw_text(tile: np.ndarray, text: str, color: tuple[int, int, int], fill: float = 0.7) -> None:
    """Write ``text`` centred into ``tile`` (``(T, T, 3)`` uint8, modified in place), its
    width at most ``fill`` of the tile's side."""
    mask = text_mask(text)
    side = tile.shape[0]
    scale = max(1, int(fill * side) // max(mask.shape[1], mask.shape[0]))
    big = np.kron(mask, np.ones((scale, scale), dtype=bool))
    h, w = big.shape
    if h > side or w > side:  # too many digits for the tile: draw them unscaled, clipped
        big, (h, w) = mask[:side, :side], mask[:side, :side].shape
    top, left = (side - h) // 2, (side - w) // 2
    region = tile[top : top + h, left : left + w]
    region[big] = color
