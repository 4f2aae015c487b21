"""Check that an environment follows the ragen contract (like gymnasium's env checker).

    >>> from ragen.envs import make
    >>> from ragen.envs.checker import check_env
    >>> check_env(make("sokoban"))          # raises EnvCheckError naming the broken rule

Checks, for each seed:

1. ``instructions`` is a non-empty string;
2. ``reset(seed)`` returns a string equal to ``render("text")``, and resetting again
   with the same seed gives the same observation and state (``snapshot()``), also
   after an episode was played;
3. ``step`` returns ``(obs: str, reward: float, terminated: bool, truncated: bool,
   info: dict)`` (an old 4-tuple with ``done`` is rejected with the fix named), with
   ``terminated or truncated == env.done`` and the info keys ``action_is_valid``,
   ``action_is_effective`` and ``success``; episodes of random valid actions run to the
   end (or a step cap) without raising. Both flags True at once is allowed (gymnasium
   allows it; consumers read it as terminated);
4. random garbage strings never raise (an exception that ``Env.step`` caught and turned
   into ``info["env_error"]`` is reported as the failure it is), and whenever one is
   reported invalid the state is unchanged and neither end flag is set; the garbage
   includes numbers longer than Python's 4300-digit ``int()`` limit, alone and inside
   well-formed actions (``"1 1 " + "9" * 4301``);
5. with the same ``seed`` and ``rng_seed`` the same actions give the same trajectory;
6. every name in ``action_names`` and the ``oracle_action`` are accepted as valid;
7. ``render("rgb")``, where supported, is an ``(H, W, 3)`` uint8 array;
8. after the end, ``step`` repeats the same ``terminated``/``truncated`` flags
   without raising;
9. an env with image observations (``observation_images()``, ``ragen.envs.visual``)
   gives one ``(H, W, 3)`` uint8 array per image placeholder of its text observation,
   the same pictures for the same seed, and a new picture when an action changed the
   state.
"""

from __future__ import annotations

import json
import math
import random
import sys
import time
from collections.abc import Iterable
from typing import Any, TextIO

import numpy as np

from ragen.errors import EnvContractError

from .base import Env, StepResultError, check_step_result
from .registry import is_plugin, make
from .visual import IMAGE_PLACEHOLDER, has_image_observations

REQUIRED_INFO_KEYS = ("action_is_valid", "action_is_effective", "success")
_GARBAGE_ALPHABET = "abcdefghijklmnopqrstuvwxyz ABCXYZ0123456789+-*/()<>|=_.,;:!?\t\n'\"#@$√é漢😀"
_LONG = "9" * 4301  # one digit past Python's limit for int(str) (a ValueError)
_FIXED_GARBAGE = (
    "",
    " ",
    "\n",
    "none",
    "<answer>up</answer>",
    "up up",
    "9" * 300,
    "(" * 200,
    "x" * 5000,
    _LONG,
    "-" + _LONG,
    f"[{_LONG}]",
    f"1 1 {_LONG}",
    f"1 2 3 {_LONG}",
    f"({_LONG}, 1) 2",
    f"{_LONG} + 1",
)


def _long_numbers(rng: random.Random, n: int) -> list[str]:
    """``n`` strings of a few numbers, one of them 4300-5000 digits long, between the
    separators actions use: a parser that calls ``int()`` on what it matched raises."""
    out = []
    for _ in range(n):
        parts = [str(rng.randint(0, 9)) for _ in range(rng.randint(1, 4))]
        parts.insert(
            rng.randrange(len(parts) + 1), str(rng.randint(1, 9)) * rng.randint(4300, 5000)
        )
        out.append(rng.choice([" ", ",", ", ", " || "]).join(parts))
    return out


class EnvCheckError(EnvContractError):
    """The environment breaks a rule of the contract (the message names it)."""


def _fail(env: Env, rule: str) -> EnvCheckError:
    return EnvCheckError(f"{type(env).__name__}{f' ({env.name})' if env.name else ''}: {rule}")


def check_env(
    env: Env,
    seeds: Iterable[int] = (0, 1, 2),
    max_steps: int = 50,
    fuzz: int = 30,
) -> None:
    """Raise :class:`EnvCheckError` if ``env`` breaks the contract; return None if it passes.

    Args:
        env: the environment instance to exercise (its state is changed).
        seeds: initial-state seeds to test.
        max_steps: cap on random steps per episode.
        fuzz: random garbage action strings tried per seed.
    """
    if not isinstance(env, Env):
        raise TypeError(f"check_env expects a ragen Env, got {type(env).__name__}")
    if not isinstance(env.instructions, str) or not env.instructions.strip():
        raise _fail(env, "instructions must be a non-empty string")
    for seed in seeds:
        rng = random.Random(seed)
        _check_reset(env, seed)
        _check_valid_names(env, seed)
        _check_garbage(env, seed, rng, fuzz)
        _check_episode(env, seed, rng, max_steps)
        _check_reproducible(env, seed, max_steps)
        _check_rgb(env, seed)
        _check_images(env, seed, rng)


#: (name, options) of the plug-in envs that passed :func:`check_plugin` in this process
_CHECKED: set[tuple[str, str]] = set()


def check_plugin(
    name: str, config: dict[str, Any] | None = None, stream: TextIO | None = None
) -> bool:
    """Run :func:`check_env` on a plug-in env (``package.module:Class``, a file, an entry
    point: :func:`ragen.envs.registry.is_plugin`) built with ``config``, before a command
    uses it; a broken one stops the command with :class:`EnvCheckError` naming the rule
    (one line), not the run hours later. ragen's own envs are skipped (the test suite
    checks them). Once per process for each (name, config); says so on ``stream``
    (stderr). Returns whether a check ran."""
    if not is_plugin(name):
        return False
    key = (name, json.dumps(config or {}, sort_keys=True, default=str))
    if key in _CHECKED:
        return False
    tic = time.perf_counter()
    env = make(name, **(config or {}))
    try:
        check_env(env, seeds=(0, 1), fuzz=20)
    except EnvCheckError as err:
        raise EnvCheckError(
            f"{err}. Fix: make the env keep the contract (docs/ENVIRONMENTS.md, 'The "
            "contract'); replay the check with ragen.envs.checker.check_env(make(NAME))"
        ) from None
    finally:
        env.close()
    _CHECKED.add(key)
    print(
        f"env {name}: passed ragen.envs.checker.check_env ({time.perf_counter() - tic:.1f}s)",
        file=stream or sys.stderr,
        flush=True,
    )
    return True


def _check_reset(env: Env, seed: int) -> None:
    obs = env.reset(seed)
    if getattr(env, "env_error", None) is not None:
        raise _fail(env, f"reset({seed}) raised {env.env_error}")
    if not isinstance(obs, str):
        raise _fail(env, f"reset must return a str, got {type(obs).__name__}")
    if obs != env.render("text"):
        raise _fail(env, "reset's observation differs from render('text')")
    if env.done:
        raise _fail(env, "the episode is done right after reset")
    state = env.snapshot()
    # play a little, then the same seed must give the same state again
    step_rng = random.Random(seed + 1)
    for _ in range(3):
        if env.done:
            break
        _checked_step(env, _any_action(env, step_rng))
    again = env.reset(seed)
    if again != obs or env.snapshot() != state:
        raise _fail(env, f"reset({seed}) is not deterministic (state differs on a second reset)")


def _check_valid_names(env: Env, seed: int) -> None:
    env.reset(seed)
    for name in env.action_names or []:
        env.reset(seed)
        info = _checked_step(env, name)[-1]
        if not info["action_is_valid"]:
            raise _fail(env, f"action name {name!r} from action_names is reported invalid")
        env.reset(seed)
        info = _checked_step(env, f"  {name.upper()} ")[-1]
        if not info["action_is_valid"]:
            raise _fail(env, f"action {name!r} is not matched case-/whitespace-insensitively")
    env.reset(seed)
    oracle = env.oracle_action()
    if oracle is not None:
        if not isinstance(oracle, str):
            raise _fail(env, f"oracle_action must return a str or None, got {oracle!r}")
        info = _checked_step(env, oracle)[-1]
        if not info["action_is_valid"]:
            raise _fail(env, f"oracle_action {oracle!r} is reported invalid")


def _check_garbage(env: Env, seed: int, rng: random.Random, fuzz: int) -> None:
    env.reset(seed)
    strings = (
        list(_FIXED_GARBAGE)
        + [
            "".join(rng.choice(_GARBAGE_ALPHABET) for _ in range(rng.randint(1, 30)))
            for _ in range(fuzz)
        ]
        + _long_numbers(rng, max(3, fuzz // 5))
    )
    for text in strings:
        if env.done:
            env.reset(seed)
        before_obs, before = env.render("text"), env.snapshot()
        try:
            obs, _, terminated, truncated, info = _checked_step(env, text)
        except EnvCheckError:
            raise
        except Exception as err:  # noqa: BLE001 - any exception is the failure we report
            raise _fail(env, f"step({text[:40]!r}) raised {type(err).__name__}: {err}") from err
        if not info["action_is_valid"]:
            if env.snapshot() != before or obs != before_obs:
                raise _fail(env, f"invalid action {text[:40]!r} changed the state")
            if terminated or truncated:
                raise _fail(env, f"invalid action {text[:40]!r} ended the episode")


def _check_episode(env: Env, seed: int, rng: random.Random, max_steps: int) -> None:
    env.reset(seed, rng_seed=rng.getrandbits(32))
    for _ in range(max_steps):
        _, _, terminated, truncated, _ = _checked_step(env, _any_action(env, rng))
        if terminated or truncated:
            obs, _, terminated_again, truncated_again, _ = _checked_step(env, _any_action(env, rng))
            if (terminated_again, truncated_again) != (terminated, truncated):
                raise _fail(
                    env,
                    "step after the episode ended must repeat its end flags "
                    f"(terminated={terminated}, truncated={truncated}), got "
                    f"terminated={terminated_again}, truncated={truncated_again}",
                )
            if obs != env.render("text"):
                raise _fail(env, "step after the end must return the current observation")
            break


def _check_reproducible(env: Env, seed: int, max_steps: int) -> None:
    def play() -> list:
        env.reset(seed, rng_seed=seed * 7 + 3)
        action_rng = random.Random(seed)
        trace = []
        for _ in range(min(max_steps, 20)):
            obs, reward, terminated, truncated, info = _checked_step(
                env, _any_action(env, action_rng)
            )
            trace.append((obs, reward, terminated, truncated, info.get("success")))
            if terminated or truncated:
                break
        return trace

    if play() != play():
        raise _fail(env, "the same seed, rng_seed and actions gave different trajectories")


def _check_rgb(env: Env, seed: int) -> None:
    env.reset(seed)
    try:
        frame = env.render("rgb")
    except (ValueError, NotImplementedError):
        return  # rgb not supported: fine
    if not (
        isinstance(frame, np.ndarray)
        and frame.dtype == np.uint8
        and frame.ndim == 3
        and frame.shape[2] == 3
        and frame.shape[0] > 0
        and frame.shape[1] > 0
    ):
        raise _fail(env, "render('rgb') must return an (H, W, 3) uint8 numpy array")
    try:
        env.render("no-such-mode")
    except ValueError:
        pass
    else:
        raise _fail(env, "render with an unknown mode must raise ValueError")


def _check_images(env: Env, seed: int, rng: random.Random) -> None:
    if not has_image_observations(env):
        return

    def pictures() -> list[np.ndarray]:
        images = env.observation_images()  # type: ignore[attr-defined]
        n_slots = env.render("text").count(IMAGE_PLACEHOLDER)
        if not isinstance(images, list) or len(images) != n_slots:
            raise _fail(
                env,
                f"observation_images() must return a list with one image per {IMAGE_PLACEHOLDER} "
                f"in the observation ({n_slots}), got {type(images).__name__} "
                f"of {len(images) if isinstance(images, list) else '?'}",
            )
        for image in images:
            if not (
                isinstance(image, np.ndarray)
                and image.dtype == np.uint8
                and image.ndim == 3
                and image.shape[2] == 3
                and min(image.shape[:2]) > 0
            ):
                raise _fail(env, "observation images must be (H, W, 3) uint8 numpy arrays")
        return [image.copy() for image in images]

    env.reset(seed)
    first = pictures()
    for _ in range(20):  # until an action changes the state
        before = env.snapshot()
        _, _, terminated, truncated, info = _checked_step(env, _any_action(env, rng))
        if env.snapshot() != before:
            after = pictures()
            if all(np.array_equal(a, b) for a, b in zip(first, after)):
                raise _fail(env, "the state changed but the observation image did not")
            break
        if terminated or truncated:
            break
    env.reset(seed)
    again = pictures()
    if len(again) != len(first) or not all(np.array_equal(a, b) for a, b in zip(first, again)):
        raise _fail(env, "reset with the same seed gave different observation images")


def _any_action(env: Env, rng: random.Random) -> str:
    try:
        return env.random_action(rng)
    except NotImplementedError:
        return rng.choice(["up", "0", "a", "1 + 1"])


def _checked_step(env: Env, action: str) -> tuple[str, float, bool, bool, dict]:
    """``env.step(action)``, its result checked against the contract (rule 3)."""
    try:
        # an env overriding ``step`` is checked here; ``Env.step`` checks ``_step`` itself
        result = check_step_result(env.step(action), f"{type(env).__name__}.step")
    except StepResultError as err:
        raise _fail(env, str(err)) from err
    obs, reward, terminated, truncated, info = result
    if isinstance(info, dict) and info.get("env_error"):  # Env.step caught an exception
        raise _fail(env, f"step({action[:40]!r}) raised {info['env_error']}")
    if not isinstance(obs, str):
        raise _fail(env, f"observation must be a str, got {type(obs).__name__}")
    if not isinstance(reward, float) or not math.isfinite(reward):
        raise _fail(env, f"reward must be a finite float, got {reward!r}")
    for flag, value in (("terminated", terminated), ("truncated", truncated)):
        if not isinstance(value, bool):
            raise _fail(env, f"{flag} must be a bool, got {type(value).__name__}")
    if not isinstance(info, dict):
        raise _fail(env, f"info must be a dict, got {type(info).__name__}")
    missing = [k for k in REQUIRED_INFO_KEYS if k not in info]
    if missing:
        raise _fail(env, f"info lacks the key(s) {missing}")
    if (terminated or truncated) != env.done:
        raise _fail(env, "terminated or truncated differs from env.done")
    return obs, reward, terminated, truncated, info
