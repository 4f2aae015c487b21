"""The environment contract every ragen environment follows.

An environment knows nothing about torch or language models. It turns ONE parsed
action string into the next observation (text), a scalar reward, a done flag and
an ``info`` dict with at least::

    info["action_is_valid"]      # the string named a legal action
    info["action_is_effective"]  # the action changed the state
    info["success"]              # the episode's goal is reached

Rules of the contract (checked by ``ragen.envs.checker.check_env``):

* ``reset(seed)`` is a pure function of ``seed`` (and the env's config): the same
  seed gives the same state in any process. Never seed from ``hash(str)``.
* Stochastic dynamics draw from ``self.rng``, reseeded by ``reset``. Every
  trajectory gets its own ``rng_seed`` so members of a group that share an
  initial state still draw their own outcomes (``reset(seed, rng_seed=...)``).
* An invalid action leaves the state unchanged and sets ``action_is_valid`` False.
  No action string can raise.
* Action strings are matched case- and whitespace-insensitively
  (see :func:`normalize_action`).
"""

from __future__ import annotations

import random
from abc import ABC, abstractmethod
from typing import Any, ClassVar

import numpy as np

StepResult = tuple[str, float, bool, dict[str, Any]]


def normalize_action(action: str) -> str:
    """Canonical form used to match action strings: lower case, single spaces."""
    return " ".join(str(action).lower().split())


def make_info(valid: bool, effective: bool, success: bool, **extra: Any) -> dict[str, Any]:
    """The ``info`` dict every ``step`` returns, with the three required keys."""
    return {
        "action_is_valid": bool(valid),
        "action_is_effective": bool(effective),
        "success": bool(success),
        **extra,
    }


def derive_seed(*parts: int | str) -> int:
    """A stable 63-bit seed from ints/strings (process-independent, unlike ``hash``)."""
    import hashlib

    digest = hashlib.blake2b("/".join(str(p) for p in parts).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") & ((1 << 63) - 1)


class Env(ABC):
    """Base class for text environments.

    Subclasses set ``name``/``description`` (or are registered with them), implement
    ``_reset``, ``_step``, ``instructions`` and ``render``, and may implement
    ``oracle_action`` (the solver's next action) and ``random_action``.
    """

    #: one-line description shown by ``ragen envs``
    description: ClassVar[str] = ""
    #: whether the env is single-turn (one response ends the episode); an instance may
    #: override it from its config (e.g. countdown with ``max_attempts > 1``)
    single_turn: bool = False
    #: the registered name this instance was built under (set by ``registry.make``)
    name: str = ""

    def __init__(self) -> None:
        self.rng = random.Random(0)
        self.seed: int | None = None
        self.done = False
        self.success = False

    # -- the contract -----------------------------------------------------------------
    def reset(self, seed: int, rng_seed: int | None = None) -> str:
        """Start an episode from the state determined by ``seed``; return the observation.

        ``rng_seed`` seeds the env's own RNG for stochastic dynamics; by default it is
        derived from ``seed``. The rollout passes a distinct ``rng_seed`` per group
        member so stochastic outcomes differ inside a group.
        """
        seed = int(seed)
        self.seed = seed
        self.rng = random.Random(derive_seed("dynamics", seed if rng_seed is None else rng_seed))
        self.done = False
        self.success = False
        self._reset(seed)
        return self.render("text")

    def step(self, action: str) -> StepResult:
        """Apply one action string; see the module docstring for ``info``."""
        if self.done:
            return self.render("text"), 0.0, True, make_info(False, False, self.success)
        obs, reward, done, info = self._step(normalize_action(action))
        self.done = bool(done)
        self.success = bool(info.get("success", False))
        return obs, float(reward), self.done, info

    @property
    @abstractmethod
    def instructions(self) -> str:
        """Rules, symbol legend and the action vocabulary, for the system prompt."""

    @abstractmethod
    def render(self, mode: str = "text") -> str | np.ndarray:
        """``"text"``: the observation string. ``"rgb"``: an HxWx3 uint8 array, where supported."""

    @property
    def action_names(self) -> list[str] | None:
        """The discrete action vocabulary, or None for free-form actions (e.g. expressions)."""
        return None

    def oracle_action(self) -> str | None:
        """The solver's next action from the current state, or None when unknown."""
        return None

    def random_action(self, rng: random.Random) -> str:
        """A uniformly random action (the 'random' reference policy)."""
        names = self.action_names
        if not names:
            raise NotImplementedError(f"{type(self).__name__} has no discrete action list")
        return rng.choice(names)

    def snapshot(self) -> object:
        """A comparable summary of the full state (used to check that invalid actions
        change nothing). The default is the text observation plus the episode flags;
        envs whose state holds more than the text shows (step counters) override it."""
        return (self.render("text"), self.done, self.success)

    def close(self) -> None:  # noqa: B027 - an optional hook, a no-op by default
        """Release resources (most envs hold none)."""

    # -- helpers for subclasses ---------------------------------------------------------
    def _unsupported_mode(self, mode: str, supported: tuple[str, ...] = ("text",)) -> ValueError:
        """The error ``render`` raises for a mode it cannot draw."""
        return ValueError(
            f"{type(self).__name__}.render got mode {mode!r}; supported: {', '.join(supported)}"
        )

    # -- to implement -----------------------------------------------------------------
    @abstractmethod
    def _reset(self, seed: int) -> None: ...

    @abstractmethod
    def _step(self, action: str) -> StepResult:
        """``action`` is already normalized. Must not raise on any string."""
