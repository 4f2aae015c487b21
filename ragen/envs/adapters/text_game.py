"""The common half of the adapters whose games are text (TextArena, TextWorld).

Such a game's state lives in another library and shows itself as text. The adapter
keeps the last observation in ``_obs`` and says what else the game's state holds in
:meth:`TextGameEnv._game_state`; the rest of the contract then reads the same for every
one of them, so it is written once, here:

* ``render``: text only, the last observation;
* ``state_key``: None. The first observation does not identify a text game's initial
  state: it may hide it (a secret number), many seeds start alike (Tower of Hanoi, an
  empty Tic Tac Toe board), or every seed is its own generated game (TextWorld, where
  probing states by text would compile a game per probe). Training and validation are
  then split by seed range alone (``ragen.agent.env_manager``);
* ``snapshot``: the observation, the game's own state and the episode's flags (the
  checker's "an invalid action changes nothing" compares it);
* ``_invalid``: the step result of a string that is no move of the game, which is
  never sent to it.
"""

from __future__ import annotations

from abc import abstractmethod

import numpy as np

from ..base import Env, StepResult, make_info


class TextGameEnv(Env):
    """An env over a text game of another library: the observation is the game's text.

    Subclasses set ``self._obs`` at every reset and step and implement
    :meth:`_game_state`, besides the contract's ``_reset``, ``_step`` and
    ``instructions``.
    """

    _obs: str = ""

    def render(self, mode: str = "text") -> str | np.ndarray:
        if mode != "text":
            raise self._unsupported_mode(mode)
        return self._obs

    def state_key(self) -> str | None:
        return None  # see the module docstring: split by seed range only

    def snapshot(self) -> object:
        return (self._obs, *self._game_state(), self.terminated, self.truncated, self.success)

    @abstractmethod
    def _game_state(self) -> tuple:
        """What of the game's state the observation may not show (counters, the game's
        own state), as comparable values."""

    def _invalid(self, reason: str) -> StepResult:
        """An action the game does not know: nothing changes, the reason is in ``info``."""
        return self._obs, 0.0, False, False, make_info(False, False, False, reason=reason)
