"""The env side of a rollout turn: each episode's actions stepped in order until one ends
it, remote envs from a thread pool, and an env that raises ending its own episode, never
the run."""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from ragen.envs.base import StepResultError, check_step_result


def play(env: Any, actions: list[str]) -> list[tuple[str, float, bool, bool, dict[str, Any]]]:
    """Step ``env`` with ``actions`` in order until one ends the episode."""
    results = []
    for action in actions:
        results.append(safe_step(env, action))
        if results[-1][2] or results[-1][3]:
            break
    return results


#: most threads stepping envs that wait on a network (``Env.concurrent_steps``)
MAX_STEP_THREADS = 64


def play_all(envs: list[Any], actions: list[list[str]]) -> list[list[tuple]]:
    """:func:`play` for every episode of the turn. Envs that declare
    ``concurrent_steps`` (remote envs: the time is spent waiting for a server) are
    stepped from a thread pool, so a batch costs about one round trip, not one per
    episode; every other env is stepped in order, in this thread."""
    if len(envs) > 1 and all(getattr(env, "concurrent_steps", False) for env in envs):
        with ThreadPoolExecutor(min(len(envs), MAX_STEP_THREADS)) as pool:
            return list(pool.map(play, envs, actions))
    return [play(env, acts) for env, acts in zip(envs, actions)]


log = logging.getLogger(__name__)


def safe_step(env: Any, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
    """``env.step`` (``(obs, reward, terminated, truncated, info)``) that turns any
    exception of the env into the end of its episode (truncated, the reason in
    ``info["env_error"]``), never the end of the run. ``Env.step`` already does so for
    exceptions in ``_step``; this covers envs that override ``step`` itself."""
    try:
        return check_step_result(env.step(action), f"{type(env).__name__}.step")
    except StepResultError:
        raise  # a broken env contract is a bug to fix, not an episode to cut
    except Exception as err:  # noqa: BLE001 - any env failure ends only its episode
        reason = f"{type(err).__name__}: {err}"
        log.warning(
            "env %s: step raised %s; the episode ends truncated", type(env).__name__, reason
        )
        try:  # mark the env, so the rollout counts the episode as failed
            env.env_error, env.truncated = reason, True
        except AttributeError:
            pass
        try:
            obs = str(env.render("text"))
        except Exception:  # noqa: BLE001 - a broken env may not render either
            obs = f"(the environment failed: {reason})"
        info = {
            "action_is_valid": False,
            "action_is_effective": False,
            "success": False,
            "env_error": reason,
        }
        return obs, 0.0, bool(getattr(env, "terminated", False)), True, info
