"""Use any gymnasium environment with a discrete action space as a ragen text env.

    >>> env = GymEnv("FrozenLake-v1", action_names=["left", "down", "right", "up"])
    >>> print(env.reset(seed=0))

**Success is defined per wrapped env** (``success``): gymnasium has no success flag,
and the sign of the last reward does not say it (CliffWalking pays -1 on the step that
reaches its goal). The rules: ``"terminated"`` (every termination is the goal:
CliffWalking), ``"positive_reward"`` (terminated with a reward above
``success_threshold``: FrozenLake's +1, Taxi's +20 drop-off), ``success_states`` (the
observations that are goals), or a callable ``(obs, reward, terminated, info) -> bool``.
``"auto"`` (the default) picks the rule of a known env (:data:`SUCCESS_RULES`) and, for
any other, ``"positive_reward"`` with a logged warning asking for the env's own rule.

The observation is the env's ANSI text render (``render_mode="ansi"``). Terminal
colours carry meaning in some envs (the FrozenLake agent is a red background, the
Taxi a yellow one), so ``ansi_styles`` maps an SGR colour code to a replacement
character before the escape codes are stripped. gymnasium's ``terminated`` and
``truncated`` pass through unchanged (a ``TimeLimit`` cut stays a truncation, and both
may be True together, as gymnasium allows). gymnasium is a dependency of
ragen, imported only when a ``GymEnv`` is built.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ragen.errors import EnvOptionError, MissingDependencyError

from ..base import Env, StepResult, make_info, normalize_action

_SGR = re.compile(r"\x1b\[([0-9;]*)m")
_OTHER_ESCAPES = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_Q_CACHE: dict[tuple, np.ndarray] = {}  # tabular oracle values per (env id, kwargs, gamma)
log = logging.getLogger(__name__)

#: the success rule of known gymnasium envs (by id without its version), for ``"auto"``
SUCCESS_RULES: dict[str, str] = {
    "FrozenLake": "positive_reward",  # +1 only at the goal; a hole terminates with 0
    "Taxi": "positive_reward",  # +20 for the drop-off that ends the episode
    "CliffWalking": "terminated",  # -1 per step, the goal too; the cliff does not terminate
    "CliffWalkingSlippery": "terminated",
}
SUCCESS_MODES = ("auto", "positive_reward", "terminated")
_WARNED: set[str] = set()  # env ids whose "auto" success rule was a guess (warned once)


def import_gymnasium() -> Any:
    try:
        import gymnasium
    except ImportError as err:
        raise MissingDependencyError(
            "gymnasium is not installed; install it with: pip install 'gymnasium>=0.29'"
        ) from err
    return gymnasium


def ansi_to_text(ansi: str, styles: Sequence[tuple[str, str]] = ()) -> str:
    """Strip ANSI escape codes, first replacing styled characters.

    Args:
        ansi: text with SGR escapes such as ``"\\x1b[41mS\\x1b[0m"``.
        styles: ``(code, replacement)`` rules tried in order; a character drawn while SGR
            ``code`` is active becomes ``replacement`` (``"{}"`` in it stands for the
            original character). Example: ``[("41", "P")]`` turns the red-highlighted
            FrozenLake cell into ``P``.

    Returns:
        The plain text, with leading/trailing blank lines removed.
    """
    out: list[str] = []
    active: set[str] = set()
    pos = 0
    for match in _SGR.finditer(ansi):
        out.append(_styled(ansi[pos : match.start()], active, styles))
        codes = match.group(1).split(";")
        if "0" in codes or codes == [""]:
            active = set()
        else:
            active |= set(codes)
        pos = match.end()
    out.append(_styled(ansi[pos:], active, styles))
    text = _OTHER_ESCAPES.sub("", "".join(out))
    return "\n".join(line.rstrip() for line in text.strip("\n").splitlines())


def _styled(chunk: str, active: set[str], styles: Sequence[tuple[str, str]]) -> str:
    if not active or not chunk:
        return chunk
    for code, replacement in styles:
        if code in active:
            return "".join(replacement.replace("{}", ch) for ch in chunk)
    return chunk


class GymEnv(Env):
    """A gymnasium env (discrete actions, ANSI render) behind the ragen contract.

    Config:
        env_id: a gymnasium id, a list of ids tried in order (the first that exists in the
            installed gymnasium wins, e.g. ``["Taxi-v4", "Taxi-v3"]``), or a zero-argument
            callable returning a gymnasium env created with ``render_mode="ansi"``.
        action_names: one name per discrete action, in action-id order.
        env_kwargs: extra keyword arguments for ``gymnasium.make``.
        max_steps: truncate the episode after this many steps (default: the env's own
            limit, e.g. its ``TimeLimit``).
        instructions: the rules text (default: a generic text listing the actions).
        ansi_styles: ``[(sgr_code, replacement), ...]``, see :func:`ansi_to_text`.
        success: how to tell a success (see the module docstring): ``"auto"``,
            ``"positive_reward"``, ``"terminated"`` or a callable
            ``(obs, reward, terminated, info) -> bool``.
        success_threshold: for ``"positive_reward"``: the reward a terminating step must
            exceed.
        success_states: observations at which a terminating step is a success (given,
            they decide, whatever ``success`` says).
        tabular_oracle: plan with value iteration on ``env.unwrapped.P`` (toy-text envs
            with integer states), giving ``oracle_action``.
        gamma: discount of that value iteration.
    """

    description = "Any gymnasium env with discrete actions and an ANSI render"

    def __init__(
        self,
        env_id: str | Sequence[str] | Callable[[], Any],
        action_names: Sequence[str],
        env_kwargs: dict[str, Any] | None = None,
        max_steps: int | None = None,
        instructions: str | None = None,
        ansi_styles: Sequence[Sequence[str]] = (),
        success_threshold: float = 0.0,
        tabular_oracle: bool = False,
        gamma: float = 0.99,
        success: str | Callable[..., bool] = "auto",
        success_states: Sequence[Any] | None = None,
    ) -> None:
        super().__init__()
        gym = import_gymnasium()
        self._env, self.env_id = _build(gym, env_id, dict(env_kwargs or {}))
        space = self._env.action_space
        if not isinstance(space, gym.spaces.Discrete):
            raise TypeError(f"{self.env_id} has action space {space}; GymEnv needs Discrete")
        names = [normalize_action(n) for n in action_names]
        if len(names) != int(space.n) or len(set(names)) != len(names) or "" in names:
            raise EnvOptionError(
                f"action_names must be {int(space.n)} distinct names for {self.env_id}, "
                f"got {list(action_names)}"
            )
        self._names = names
        self._index = {n: i for i, n in enumerate(names)}
        if max_steps is not None and max_steps < 1:
            raise EnvOptionError(f"max_steps={max_steps} must be >= 1 (or None)")
        self.max_steps = max_steps
        self._instructions = instructions
        self.ansi_styles = [(str(code), str(rep)) for code, rep in ansi_styles]
        self.success_threshold = float(success_threshold)
        self.success_states = None if success_states is None else list(success_states)
        self.success_rule = _success_rule(success, self.env_id, self.success_states)
        self.gamma = float(gamma)
        self._q: np.ndarray | None = None
        if tabular_oracle and callable(env_id):
            self._q = _tabular_q(self._env, self.gamma)
        elif tabular_oracle:
            # the model is static: plan once per (id, kwargs, gamma), not once per instance
            key = (self.env_id, repr(sorted((env_kwargs or {}).items())), self.gamma)
            if key not in _Q_CACHE:
                _Q_CACHE[key] = _tabular_q(self._env, self.gamma)
            self._q = _Q_CACHE[key]
        self._obs: Any = None
        self._text = ""
        self._steps = 0
        self.reset(0)  # usable (render, step) right away, like the built-in envs

    # -- episode -----------------------------------------------------------------------------
    def _reset(self, seed: int) -> None:
        self._obs, _ = self._env.reset(seed=seed % (1 << 63))
        # the initial state came from ``seed``; the dynamics follow this trajectory's rng
        self._env.unwrapped.np_random = np.random.default_rng(self.rng.getrandbits(64))
        self._steps = 0
        self._text = self._render_now()

    def _step(self, action: str) -> StepResult:
        a = self._index.get(action)
        if a is None:
            return self._text, 0.0, False, False, make_info(False, False, False)
        obs, reward, terminated, truncated, gym_info = self._env.step(a)
        effective = not _same(obs, self._obs)
        self._obs = obs
        self._steps += 1
        self._text = self._render_now()
        terminated, truncated = bool(terminated), bool(truncated)  # gymnasium's, unchanged
        success = self._is_success(obs, float(reward), terminated, gym_info)
        # our own limit adds truncation (its counter is not in the observation), never
        # on a terminating step
        if not terminated and self.max_steps is not None and self._steps >= self.max_steps:
            truncated = True
        info = make_info(True, effective, success, steps=self._steps)
        return self._text, float(reward), terminated, truncated, info

    def _is_success(self, obs: Any, reward: float, terminated: bool, info: Any) -> bool:
        if self.success_states is not None:
            return terminated and any(_same(obs, goal) for goal in self.success_states)
        rule = self.success_rule
        if callable(rule):
            return bool(rule(obs, reward, terminated, info))
        if rule == "terminated":
            return terminated
        return terminated and reward > self.success_threshold

    def _render_now(self) -> str:
        return ansi_to_text(str(self._env.render()), self.ansi_styles)

    # -- views ----------------------------------------------------------------------------------
    @property
    def action_names(self) -> list[str]:
        return list(self._names)

    @property
    def gym_env(self) -> Any:
        """The wrapped gymnasium env."""
        return self._env

    def snapshot(self) -> object:
        obs = self._obs.tobytes() if isinstance(self._obs, np.ndarray) else repr(self._obs)
        return (obs, self._steps, self.done, self.success)

    @property
    def instructions(self) -> str:
        if self._instructions:
            return self._instructions
        return (
            f"You are playing the gymnasium environment {self.env_id}. The state is shown as "
            "text.\nAnswer with one or more of: " + ", ".join(self._names) + "."
        )

    def state_key(self) -> None:
        """No state split: many gymnasium envs start from one fixed state, and their
        text rendering need not show the whole state; the seed ranges separate the splits."""
        return None

    def render(self, mode: str = "text") -> str | np.ndarray:
        if mode == "text":
            return self._text
        raise self._unsupported_mode(mode)

    def oracle_action(self) -> str | None:
        """Greedy action of the tabular value iteration (when ``tabular_oracle``)."""
        if self._q is None or self.done or not isinstance(self._obs, (int, np.integer)):
            return None
        return self._names[int(np.argmax(self._q[int(self._obs)]))]

    def close(self) -> None:
        self._env.close()


def _build(gym: Any, env_id: Any, kwargs: dict[str, Any]) -> tuple[Any, str]:
    if callable(env_id):
        env = env_id()
        return env, getattr(getattr(env, "spec", None), "id", None) or type(env).__name__
    ids = [env_id] if isinstance(env_id, str) else list(env_id)
    if not ids:
        raise EnvOptionError("env_id must name at least one gymnasium environment")
    errors = []
    for candidate in ids:
        try:
            env = gym.make(candidate, render_mode="ansi", disable_env_checker=True, **kwargs)
        except gym.error.Error as err:  # unknown / deprecated id: try the next one
            errors.append(f"{candidate}: {err}")
            continue
        return env, candidate
    raise EnvOptionError(f"no usable gymnasium environment among {ids}: {'; '.join(errors)}")


def _success_rule(
    success: str | Callable[..., bool], env_id: str, states: list[Any] | None
) -> str | Callable[..., bool]:
    """The success rule of ``env_id``: ``success`` itself unless it is ``"auto"``."""
    if callable(success):
        return success
    if success not in SUCCESS_MODES:
        raise EnvOptionError(
            f"success={success!r}; use one of {', '.join(SUCCESS_MODES)}, success_states=[...] "
            "or a callable (obs, reward, terminated, info) -> bool"
        )
    if success != "auto":
        return success
    family = str(env_id).split("-v")[0]
    if family in SUCCESS_RULES:
        return SUCCESS_RULES[family]
    if states is None and env_id not in _WARNED:
        _WARNED.add(env_id)
        log.warning(
            "GymEnv %s: no known success rule; success = terminated with a reward above "
            "success_threshold. If that is not this env's goal, pass success='terminated', "
            "success_states=[...] or a callable",
            env_id,
        )
    return "positive_reward"


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return bool(np.array_equal(a, b))
    return bool(a == b)


def _tabular_q(env: Any, gamma: float) -> np.ndarray:
    """``Q[s, a]`` by value iteration on the model ``env.unwrapped.P`` (toy-text layout:
    ``P[s][a] = [(prob, next_state, reward, terminated), ...]``)."""
    model = getattr(env.unwrapped, "P", None)
    if not isinstance(model, dict):
        raise EnvOptionError(
            f"tabular_oracle needs a tabular model env.unwrapped.P; {type(env.unwrapped).__name__} "
            "has none"
        )
    n_states, n_actions = len(model), len(model[0])
    rows, nxt, prob, reward, cont = [], [], [], [], []
    for s, actions in model.items():
        for a, outcomes in actions.items():
            for p, s2, r, terminated in outcomes:
                rows.append(s * n_actions + a)
                nxt.append(s2)
                prob.append(p)
                reward.append(r)
                cont.append(0.0 if terminated else 1.0)
    rows_a, nxt_a = np.array(rows), np.array(nxt)
    prob_a, cont_a = np.array(prob), np.array(cont)
    expected_reward = np.bincount(
        rows_a, weights=prob_a * np.array(reward), minlength=n_states * n_actions
    )
    values = np.zeros(n_states)
    for _ in range(100_000):
        future = np.bincount(
            rows_a, weights=prob_a * cont_a * values[nxt_a], minlength=n_states * n_actions
        )
        q = (expected_reward + gamma * future).reshape(n_states, n_actions)
        new = q.max(axis=1)
        if np.max(np.abs(new - values)) < 1e-10:
            break
        values = new
    return q


# -- presets -------------------------------------------------------------------------------------

FROZEN_LAKE_INSTRUCTIONS = (
    "You are walking on a frozen lake (gymnasium FrozenLake-v1). Reach the goal G without "
    "falling into a hole H. P marks you, S the start, F frozen ice. The ice is slippery: "
    "you move in the intended direction with probability 1/3 and sideways otherwise.\n"
    "Reward: +1 at the goal.\nAnswer with one or more of: left, down, right, up."
)

TAXI_INSTRUCTIONS = (
    "You drive a taxi (gymnasium Taxi). The map is a 5x5 grid drawn with walls '|' that "
    "block east/west moves; ':' is passable. R, G, Y, B are the four stands. T marks the "
    "empty taxi, C the taxi carrying the passenger, P the waiting passenger's stand, D the "
    "destination stand. Pick the passenger up at P and drop them off at D.\n"
    "Reward: -1 per step, +20 for a correct drop-off (ends the episode), -10 for an "
    "illegal pickup or drop-off.\n"
    "Answer with one or more of: south, north, east, west, pickup, dropoff."
)


class GymFrozenLakeEnv(GymEnv):
    """gymnasium's ``FrozenLake-v1`` (fixed 4x4 map) through the adapter."""

    description = "gymnasium FrozenLake-v1 through the adapter (slippery, fixed 4x4 map)"

    def __init__(
        self, is_slippery: bool = True, map_name: str = "4x4", max_steps: int | None = None
    ) -> None:
        super().__init__(
            "FrozenLake-v1",
            action_names=["left", "down", "right", "up"],
            env_kwargs={"is_slippery": bool(is_slippery), "map_name": map_name},
            max_steps=max_steps,
            instructions=FROZEN_LAKE_INSTRUCTIONS,
            ansi_styles=[("41", "P")],
            tabular_oracle=True,
        )


class GymTaxiEnv(GymEnv):
    """gymnasium's Taxi: ``Taxi-v4`` where available (gymnasium >= 1.3 deprecates v3; with
    default options the dynamics are the same), else ``Taxi-v3``."""

    description = "gymnasium Taxi through the adapter (pick up and drop off a passenger)"

    def __init__(self, max_steps: int | None = None) -> None:
        super().__init__(
            ["Taxi-v4", "Taxi-v3"],
            action_names=["south", "north", "east", "west", "pickup", "dropoff"],
            max_steps=max_steps,
            instructions=TAXI_INSTRUCTIONS,
            # taxi first: it is drawn over the stand letters it stands on
            ansi_styles=[("43", "T"), ("42", "C"), ("34", "P"), ("35", "D")],
            tabular_oracle=True,
        )
