"""The grid games seen as pictures (VAGEN): the agent sees ``render("rgb")``.

    >>> env = make("sokoban_visual")              # cell_size 14: a 6x6 room is 84x84 pixels
    >>> env.reset(0)
    '<image>'
    >>> env.observation_images()[0].shape
    (84, 84, 3)

Same dynamics, seeds, rewards and invalid-action rules as the text env they extend
(they ARE that env: a subclass that only changes what an observation looks like).

How a picture travels (:mod:`ragen.envs.visual`): the observation stays a ``str``
holding :data:`~ragen.envs.visual.IMAGE_PLACEHOLDER` where the picture goes, and
:meth:`VisualMixin.observation_images` returns the pictures of the current observation
as ``(H, W, 3)`` uint8 numpy arrays, one per placeholder, in order.

``text_grid=True`` appends the env's text observation after the picture (the picture
and the symbols then say the same thing; useful to tell apart "cannot see" from
"cannot plan"). ``cell_size`` is the pixel size of one cell; the defaults make the
default maps 84x84 pixels, the tiny VLM's input size (``ragen.models.tiny_vlm``),
where one 14-pixel patch of its vision encoder covers one Sokoban cell.
"""

from __future__ import annotations

import inspect
from typing import Any

import numpy as np

from ragen.errors import EnvConfigError

from ..visual import IMAGE_PLACEHOLDER
from .frozen_lake import FrozenLakeEnv
from .sokoban.env import SokobanEnv


class VisualMixin:
    """Observation = :data:`IMAGE_PLACEHOLDER` (+ the text grid); picture = ``render("rgb")``.

    Mixed in front of a grid env whose ``render("text")`` is its text observation and
    whose ``render("rgb")`` draws cells of ``tile_size`` pixels.
    """

    text_grid: bool = False
    #: the picture legend that replaces the symbol legend in ``instructions``
    picture_legend: str = ""

    def _init_visual(self, text_grid: bool) -> None:
        self.text_grid = bool(text_grid)

    def grid_observation(self) -> str:
        """The text env's observation (what ``render("text")`` of the text env shows)."""
        return super().render("text")  # type: ignore[misc]

    def render(self, mode: str = "text") -> str | np.ndarray:
        if mode == "text":
            if self.text_grid:
                return f"{IMAGE_PLACEHOLDER}\n{self.grid_observation()}"
            return IMAGE_PLACEHOLDER
        if mode == "grid":
            return self.grid_observation()
        if mode == "rgb":
            return super().render("rgb")  # type: ignore[misc]
        raise self._unsupported_mode(mode, ("text", "grid", "rgb"))  # type: ignore[attr-defined]

    def observation_images(self) -> list[np.ndarray]:
        """The pictures of the current observation, ``[(H, W, 3) uint8]``, one per
        :data:`IMAGE_PLACEHOLDER` in ``render("text")``."""
        return [self.render("rgb")]  # type: ignore[list-item]

    # The state is what the text env shows, not the placeholder: the held-out split
    # (state_key) and the checker's "nothing changed" test (snapshot) must see it.
    def state_key(self) -> str | None:
        return self.grid_observation()

    def snapshot(self) -> object:
        return (
            self.grid_observation(),
            self.terminated,  # type: ignore[attr-defined]
            self.truncated,  # type: ignore[attr-defined]
            self.success,  # type: ignore[attr-defined]
        )

    def _visual_instructions(self, text_instructions: str) -> str:
        """The text env's rules with its symbol legend replaced by the picture legend."""
        lines = text_instructions.split("\n")
        out, skipping = [], False
        for line in lines:
            if line.startswith("Symbols:"):
                skipping = True
                out.append(self.picture_legend)
                continue
            if skipping and line.startswith("  "):
                continue  # a legend entry
            skipping = False
            out.append(line)
        text = "\n".join(out)
        if self.text_grid:
            text += "\nBelow the picture, the same state is drawn with symbols."
        return text


def _check_kwargs(text_env: type, kwargs: dict[str, Any]) -> None:
    """The text env's own keys pass through; anything else is a config error naming them
    (``tile_size`` is ``cell_size`` here)."""
    allowed = [k for k in inspect.signature(text_env.__init__).parameters if k != "self"]
    allowed.remove("tile_size")
    unknown = sorted(set(kwargs) - set(allowed))
    if unknown:
        raise EnvConfigError(
            f"unknown config key(s) {unknown}; accepted keys: cell_size, text_grid, "
            f"{', '.join(allowed)}"
        )


class VisualSokobanEnv(VisualMixin, SokobanEnv):
    """Sokoban seen as a picture (``sokoban_visual``); ``SokobanEnv`` otherwise."""

    picture_legend = (
        "The state is a picture of the room, one square per cell: dark brown squares are "
        "walls, beige is empty floor, a red ring is a target, an orange square is a box, "
        "a green square is a box on a target, and the blue disc is you (on a red ring: "
        "you stand on a target)."
    )

    def __init__(self, cell_size: int = 14, text_grid: bool = False, **kwargs: Any) -> None:
        _check_kwargs(SokobanEnv, kwargs)
        super().__init__(tile_size=cell_size, **kwargs)
        self._init_visual(text_grid)

    @property
    def instructions(self) -> str:
        return self._visual_instructions(super().instructions)


class VisualFrozenLakeEnv(VisualMixin, FrozenLakeEnv):
    """FrozenLake seen as a picture (``frozen_lake_visual``); ``FrozenLakeEnv`` otherwise."""

    picture_legend = (
        "The state is a picture of the lake, one square per cell: light blue is frozen "
        "ice, dark blue is a hole, the yellow square is the goal, and the red disc is you."
    )

    def __init__(self, cell_size: int = 21, text_grid: bool = False, **kwargs: Any) -> None:
        _check_kwargs(FrozenLakeEnv, kwargs)
        super().__init__(tile_size=cell_size, **kwargs)
        self._init_visual(text_grid)

    @property
    def instructions(self) -> str:
        return self._visual_instructions(super().instructions)
