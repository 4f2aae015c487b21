"""The environment contract every ragen environment follows.

An environment knows nothing about torch or language models. It turns ONE parsed
action string into the next observation (text), a scalar reward, two end flags and
an ``info`` dict, like gymnasium::

    obs, reward, terminated, truncated, info = env.step("up")

* ``terminated``: the MDP reached a terminal state (goal, hole, solved, the single
  answer of a single-turn env given). Nothing follows it: its value is 0.
* ``truncated``: the env cut the episode for a reason the agent does not observe
  (a step limit whose counter the observation does not show, gymnasium's
  ``TimeLimit``). The return would have continued: a critic should bootstrap.
* Both may be True at once (gymnasium allows it: a ``TimeLimit`` hit on the step that
  also terminates). Consumers then treat the episode as terminated, since a terminal
  state has no future to bootstrap. The built-in envs never set both.
* ``env.done`` is ``terminated or truncated``: "is the episode over".

``info`` holds at least::

    info["action_is_valid"]      # the string named a legal action
    info["action_is_effective"]  # the action changed the state
    info["success"]              # the episode's goal is reached

Rules of the contract (checked by ``ragen.envs.checker.check_env``):

* ``reset(seed)`` is a pure function of ``seed`` (and the env's config): the same
  seed gives the same state in any process. Never seed from ``hash(str)``.
* Stochastic dynamics draw from ``self.rng``, reseeded by ``reset``. Every
  trajectory gets its own ``rng_seed`` so members of a group that share an
  initial state still draw their own outcomes (``reset(seed, rng_seed=...)``).
* An invalid action leaves the state unchanged, sets ``action_is_valid`` False and
  neither end flag. No action string can raise. An action longer than
  :data:`MAX_ACTION_CHARS` is invalid without reaching ``_step`` (locally and served
  alike: a served env's request then always fits the server's body limit).
* An exception inside ``_step`` (or ``_reset``) is a bug of the env, not of the agent:
  ``step`` ends that episode as *truncated*, with the reason in ``info["env_error"]``
  and ``env.env_error`` and a logged warning (logger ``ragen.envs``), and the run goes
  on; the rollout counts such episodes (``rollout.max_env_error_share``). A
  :class:`~ragen.errors.RagenError` from ``_reset`` (a bad option) still propagates.
* After the episode ended, ``step`` changes nothing and repeats the end flags.
* Action strings are matched case- and whitespace-insensitively
  (see :func:`normalize_action`).
"""

from __future__ import annotations

import hashlib
import logging
import random
from abc import ABC, abstractmethod
from typing import Any, ClassVar

import numpy as np

from ragen.errors import EnvContractError, RagenError

from .facts import Fact

#: ``(observation, reward, terminated, truncated, info)``
StepResult = tuple[str, float, bool, bool, dict[str, Any]]

_STEP_FIELDS = "(obs, reward, terminated, truncated, info)"

#: actions longer than this are invalid before they reach an env: no env's action is
#: this long, and a served env's request (JSON, up to 12 bytes a character) stays under
#: the server's 1 MiB body limit, so local and remote envs answer the same
MAX_ACTION_CHARS = 65_536

#: the most digits a number in an action may have: a longer one makes the action invalid.
#: Far above any board or guess, far below the 4300 digits past which Python refuses
#: ``int(text)`` (``sys.get_int_max_str_digits``) with a ValueError
MAX_NUMBER_DIGITS = 64

log = logging.getLogger("ragen.envs")


class StepResultError(EnvContractError, TypeError):
    """``step``/``_step`` returned something other than the 5-tuple of the contract."""


def check_step_result(result: object, where: str) -> StepResult:
    """``result`` unpacked as a :data:`StepResult`; raises :class:`StepResultError`
    naming the fix when it has the wrong shape (e.g. the old 4-tuple with ``done``)."""
    if isinstance(result, tuple) and len(result) == 5:
        return result  # type: ignore[return-value]
    if isinstance(result, tuple) and len(result) == 4:
        raise StepResultError(
            f"{where} returned the old 4-tuple (obs, reward, done, info); return "
            f"{_STEP_FIELDS} instead: terminated=True at a terminal state (goal, failure, "
            "answer given), truncated=True when the episode is cut for a reason the agent "
            "does not observe (e.g. a hidden step limit)"
        )
    shape = f"a {len(result)}-tuple" if isinstance(result, tuple) else type(result).__name__
    raise StepResultError(f"{where} must return {_STEP_FIELDS}, got {shape}")


def normalize_action(action: str) -> str:
    """Canonical form used to match action strings: lower case, single spaces."""
    return " ".join(str(action).lower().split())


def parse_int(digits: str) -> int | None:
    """``int(digits)`` for a number an action may hold, or None when it has more than
    :data:`MAX_NUMBER_DIGITS` digits (an invalid action, never a ValueError)."""
    digits = digits.strip()
    if len(digits.lstrip("+-").lstrip("0")) > MAX_NUMBER_DIGITS:
        return None
    return int(digits)


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
        self.terminated = False  # the episode reached a terminal state
        self.truncated = False  # the env cut the episode (see the module docstring)
        self.success = False
        # why the current episode ended by an env failure (an exception, a server that
        # did not answer); None while it plays normally
        self.env_error: str | None = None

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
        self.terminated = self.truncated = False
        self.success = False
        self.env_error = None
        try:
            self._reset(seed)
        except RagenError:
            raise  # a bad option or a missing dependency: the user's to fix, not the episode's
        except Exception as err:  # noqa: BLE001 - any bug of the env ends only this episode
            self._end_by_error("reset", err)
            return f"(the environment failed: {self.env_error})"
        return self.render("text")

    @property
    def done(self) -> bool:
        """The episode is over: ``terminated or truncated``."""
        return self.terminated or self.truncated

    def step(self, action: str) -> StepResult:
        """Apply one action string: ``(obs, reward, terminated, truncated, info)``, see the
        module docstring. After the end it changes nothing and repeats the end flags."""
        if self.done:
            info = make_info(False, False, self.success)
            return self._text_or_error(), 0.0, self.terminated, self.truncated, info
        action = str(action)
        if len(action) > MAX_ACTION_CHARS:
            reason = f"the action has {len(action)} characters; at most {MAX_ACTION_CHARS}"
            info = make_info(False, False, False, reason=reason)
            return self.render("text"), 0.0, False, False, info
        try:
            result = self._step(normalize_action(action))
        except RagenError:
            raise  # a bad option or a missing dependency: the user's to fix, not the episode's
        except Exception as err:  # noqa: BLE001 - any bug of the env ends only this episode
            self._end_by_error("step", err)
            info = make_info(False, False, self.success, env_error=self.env_error)
            return self._text_or_error(), 0.0, self.terminated, True, info
        obs, reward, terminated, truncated, info = check_step_result(
            result, f"{type(self).__name__}._step"
        )
        self.terminated, self.truncated = bool(terminated), bool(truncated)
        self.success = bool(info.get("success", False))
        return obs, float(reward), self.terminated, self.truncated, info

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

    def state_key(self) -> str | None:
        """A canonical description of the current state; read right after ``reset`` to
        split INITIAL STATES (not seeds) between training and validation, so that no
        validation state is ever trained on (``ragen.agent.env_manager``).

        Default: the text observation, which is the whole state of a fully observed env
        (the grids, countdown). Return None when the state cannot be split this way (a
        handful of initial states, or a state the text does not show): then only the
        seed ranges separate training from validation.
        """
        text = self.render("text")
        return text if isinstance(text, str) else None

    # -- reasoning checks (ragen.envs.facts) ------------------------------------------
    #: kinds of fact a grounded thought states about this env (empty: no checker; the
    #: env then supports only the ``no_think`` and ``free_think`` reasoning formats)
    fact_kinds: ClassVar[tuple[str, ...]] = ()
    #: kinds a world-model prediction states (the objects an action can move)
    prediction_kinds: ClassVar[tuple[str, ...]] = ()

    def state_facts(self) -> list[Fact]:
        """The facts of the current state that a grounded thought must state, in
        canonical order (``format_facts`` gives the expected text)."""
        raise NotImplementedError(f"{type(self).__name__} has no state checker (fact_kinds)")

    def predict_facts(self, actions: list[str]) -> list[Fact]:
        """Facts (of ``prediction_kinds``) of the state after the intended outcome of
        ``actions`` from the current state, without changing the env."""
        raise NotImplementedError(f"{type(self).__name__} has no state checker (fact_kinds)")

    def oracle_action(self) -> str | None:
        """The solver's next action from the current state, or None when unknown."""
        return None

    # -- curriculum (env.curriculum) -----------------------------------------------------
    #: what :meth:`difficulty` measures, for docs and errors (empty: no curriculum)
    difficulty_meaning: ClassVar[str] = ""

    def difficulty(self) -> float | None:
        """How hard the current (initial) state is, higher is harder, or None when the env
        cannot tell: a curriculum (``env.curriculum``) trains on states whose difficulty
        is within its current level. Read right after ``reset``."""
        return None

    # -- progress potential (rollout.progress_reward) -----------------------------------
    #: what :meth:`progress_potential` measures, for docs and errors (empty: no potential)
    progress_potential_meaning: ClassVar[str] = ""

    def progress_potential(self) -> float:
        """``Phi(s)`` of the current state for potential-based reward shaping (Ng, Harada
        & Russell 1999): the rollout adds ``w * (Phi(s') - Phi(s))`` to a turn's reward
        (``rollout.progress_reward = w``). Higher is closer to solving; an env that can
        measure it (usually through its solver) sets ``progress_potential_meaning``.
        Along an episode the shaping telescopes to ``w * (Phi(s_T) - Phi(s_0))``, so it
        cannot make a detour pay: it only tells each move how much nearer it got."""
        raise NotImplementedError(f"{type(self).__name__} has no progress potential")

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
        return (self.render("text"), self.terminated, self.truncated, self.success)

    def check_available(self) -> None:  # noqa: B027 - an optional hook, a no-op by default
        """Raise :class:`~ragen.errors.EnvUnavailableError` when the env cannot play at
        all (a served env whose server is unreachable). The env manager calls it once,
        before a run, an eval or an SFT job plays anything: fail fast, never train on
        episodes that could not start."""

    def close(self) -> None:  # noqa: B027 - an optional hook, a no-op by default
        """Release resources (most envs hold none)."""

    # -- env failures ------------------------------------------------------------------
    def _end_by_error(self, where: str, err: BaseException) -> None:
        """End the episode as truncated because the env itself failed (an exception in
        ``where``): the reason goes to ``env_error`` and the log."""
        self.env_error = f"{type(err).__name__}: {err}"
        self.truncated = True
        log.warning(
            "env %s (seed %s): %s raised %s; the episode ends truncated",
            self.name or type(self).__name__,
            self.seed,
            where,
            self.env_error,
        )

    def _text_or_error(self) -> str:
        """The text observation, or the failure when the env cannot render after it."""
        if self.env_error is not None:
            try:
                return str(self.render("text"))
            except Exception:  # noqa: BLE001 - a failed env may not render any more
                return f"(the environment failed: {self.env_error})"
        return self.render("text")

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
        """``action`` is already normalized. Returns ``(obs, reward, terminated,
        truncated, info)``; an invalid action returns both flags False. Must not raise
        on any string."""
