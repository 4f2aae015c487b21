"""``env_groups x group_size`` environments with StarPO's seeding rules.

* Every member of a group starts from the same initial-state ``seed`` (so their
  returns are comparable: the group baseline of GRPO, the reward std of StarPO-S).
* Each member still draws its own stochastic outcomes: ``env.reset(seed, rng_seed=r)``
  with ``r = derive_seed(manager_seed, "member", seed, member)``, distinct per member
  (docs/ARCHITECTURE.md, "Pitfalls": stochastic rewards must not be shared by a whole group).

Held out means held out. Disjoint seed ranges are not enough: two seeds can generate
the same room. The split is therefore on the initial STATE: an env's ``state_key()``
(its canonical state right after reset) is hashed, and one state in
:data:`HELD_OUT_EVERY` is a validation state. Training seeds (``[0, VAL_SEED_START)``,
drawn per step and group) skip every validation state; validation seeds
(``[VAL_SEED_START, 2 * VAL_SEED_START)``, a fixed list) keep only validation states,
each once (two seeds that generate one room give one entry).
No training, SFT or validation-seed draw can cross, whatever the env config. Envs whose
``state_key()`` is None (the bandit, gymnasium envs) are split by seed range alone.

Index of environment ``(group g, member m)`` in ``envs``: ``g * group_size + m``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from ragen.envs import make
from ragen.envs.base import Env, derive_seed
from ragen.errors import EnvConfigError, EnvUnavailableError, RagenError, UsageError

VAL_SEED_START = 10**9  # validation seeds start here; training seeds stay below
HELD_OUT_EVERY = 8  # one initial state in 8 (by hash) is a validation state
# draws tried before concluding that an env has too few distinct initial states to split
MAX_DRAWS = 10_000
SCAN_REPORT_EVERY = 4096  # validation_seeds(progress=...) reports after this many candidates


def is_held_out(state_key: str) -> bool:
    """Whether the initial state described by ``state_key`` belongs to validation: a
    process-independent hash, so every run and machine agrees."""
    return derive_seed("held-out", state_key) % HELD_OUT_EVERY == 0


def _make_checked(factory: Callable[..., Env], name: str, options: dict[str, Any]) -> Env:
    """``factory(**options)``; a ValueError/TypeError from an env given options is the
    env rejecting one of them (``dim_room=abc``): a one-line :class:`EnvConfigError`."""
    try:
        return factory(**options)
    except RagenError:
        raise
    except (ValueError, TypeError) as err:
        if not options:  # no options given: a bug of the env, keep its traceback
            raise
        shown = " ".join(f"{k}={v!r}" for k, v in options.items())
        raise EnvConfigError(
            f"env {name!r} rejects its options {shown}: {err}. Fix: correct the value "
            "(env.config.* for ragen train, --env-config for eval/sft; `ragen envs` lists "
            "each env's options and defaults)"
        ) from None


class EnvStateManager:
    """Builds and resets the environments of one rollout batch.

    It holds no training state: the seeds of step ``s`` are :meth:`seeds_for_step(s)`,
    a pure function of ``(seed, s)``, so a resumed run needs nothing from here.
    """

    def __init__(
        self,
        env_name: str | Callable[..., Env],
        env_config: dict[str, Any] | None = None,
        env_groups: int = 8,
        group_size: int = 16,
        seed: int = 0,
        train_states: int = 0,
    ) -> None:
        """``train_states``: 0 draws a fresh training state per group and step; N > 0
        draws every training group from one fixed pool of N distinct training states
        (RAGEN's prompt-diversity ablation, and the overfitting check of RL on the grids).

        ``env_name``: a registered name (``ragen.envs.make(env_name, **env_config)``) or
        a factory called as ``env_name(**env_config)`` (an Env subclass, for tests and
        unregistered envs)."""
        if env_groups < 1 or group_size < 1:
            raise ValueError(
                f"env_groups and group_size must be >= 1, got {env_groups} and {group_size}"
            )
        self.env_config = dict(env_config or {})
        if isinstance(env_name, str):
            self.env_name = env_name
            factory: Callable[..., Env] = functools.partial(make, env_name)
        elif callable(env_name):
            self.env_name = getattr(env_name, "__name__", type(env_name).__name__)
            factory = env_name
        else:
            raise TypeError(f"env must be a registered name or an Env factory, got {env_name!r}")
        self.env_groups, self.group_size, self.seed = int(env_groups), int(group_size), int(seed)
        if int(train_states) < 0:
            raise UsageError(
                f"env.train_states must be >= 0 (0 = a fresh state per group), got {train_states}"
            )
        self.train_states = int(train_states)
        self._pool: list[int] | None = None  # the fixed training pool, built on first use
        # resets candidate seeds, plays nothing; built first: a bad option fails here
        self._probe = _make_checked(factory, self.env_name, self.env_config)
        self.envs: list[Env] = [
            factory(**self.env_config) for _ in range(self.env_groups * self.group_size)
        ]
        self.group_seeds: list[int] = []
        # a curriculum's level: training states harder than this (Env.difficulty) are
        # passed over when seeds are drawn; None draws every training state
        self.max_difficulty: float | None = None
        # a served env whose server is not there: one clear error now, not a run whose
        # every prompt says "(remote environment unavailable)"
        self._probe.check_available()
        self._validation: list[int] = []  # validation seeds found so far, in order
        self._validation_keys: set[str] = set()  # their initial states (all distinct)
        self._next_val_candidate = VAL_SEED_START

    @property
    def num_envs(self) -> int:
        return len(self.envs)

    # -- seeds ----------------------------------------------------------------------
    def held_out(self, seed: int) -> bool | None:
        """Whether ``seed``'s initial state is a validation state (None: the env has no
        state split, see the module docstring)."""
        key = self._probe_key(seed)
        return None if key is None else is_held_out(key)

    def _probe_key(self, seed: int) -> str | None:
        """``state_key()`` of ``seed``'s initial state. An env that fails to reset here
        stops the run: without its state, no seed can be shown to be a training state."""
        self._probe.reset(seed)
        error = getattr(self._probe, "env_error", None)
        if error is not None:
            raise EnvUnavailableError(
                f"{self.env_name}: resetting seed {seed} to split training from validation "
                f"states failed ({error}); no seed can be checked against the held-out "
                "states. Fix: the env (or its server), then resume the run"
            )
        return self._probe.state_key()

    def seeds_for_step(self, step: int, draw: int = 0) -> list[int]:
        """Training initial-state seeds of batch ``step``, a pure function of
        ``(seed, step, draw, max_difficulty)``: group g takes the first draw
        ``derive_seed("train", seed, step, g, attempt) mod VAL_SEED_START`` whose initial
        state is not a validation state (and, under a curriculum, is no harder than
        ``max_difficulty``). ``draw > 0`` gives further, different seeds for the same step
        (``derive_seed("train", seed, step, "draw", draw, g, attempt)``): the refills of
        dynamic sampling."""
        if step < 0:
            raise ValueError(f"step must be >= 0, got {step}")
        if self.train_states:
            if draw or self.max_difficulty is not None:
                raise UsageError(
                    "env.train_states (a fixed pool) cannot be combined with dynamic "
                    "sampling or a curriculum, which draw fresh states. Fix: "
                    "env.train_states=0, or turn those off"
                )
            # with a pool, group g of step s takes pool[derive_seed("train", seed, s, g) mod N]
            pool = self.train_pool()
            return [
                pool[derive_seed("train", self.seed, step, g) % len(pool)]
                for g in range(self.env_groups)
            ]
        seeds = []
        extra = ("draw", draw) if draw else ()
        for g in range(self.env_groups):
            for attempt in range(MAX_DRAWS):
                seed = derive_seed("train", self.seed, step, *extra, g, attempt) % VAL_SEED_START
                if not self.held_out(seed) and self.within_curriculum(seed):
                    seeds.append(seed)
                    break
            else:
                if self.max_difficulty is not None:
                    raise UsageError(
                        f"no training state of {self.env_name} with difficulty <= "
                        f"{self.max_difficulty:g} in {MAX_DRAWS} draws "
                        f"({self._probe.difficulty_meaning}). Fix: a higher env.curriculum.start"
                    )
                raise self._too_few_states("training")
        return seeds

    def within_curriculum(self, seed: int) -> bool:
        """Whether ``seed``'s initial state is no harder than ``max_difficulty`` (always,
        without a curriculum). States whose difficulty the env cannot tell are passed over."""
        if self.max_difficulty is None:
            return True
        self._probe.reset(seed)
        level = self._probe.difficulty()
        return level is not None and level <= self.max_difficulty

    def train_pool(self) -> list[int]:
        """The fixed pool of ``train_states`` training seeds: draws
        ``derive_seed("pool", seed, attempt) mod VAL_SEED_START`` in order, keeping each
        that is a training state not already in the pool (distinct initial STATES, by
        ``state_key()``; distinct seeds for envs without one)."""
        if self._pool is None:
            pool: list[int] = []
            keys: set[str] = set()
            attempt = misses = 0
            while len(pool) < self.train_states and misses < MAX_DRAWS:
                seed = derive_seed("pool", self.seed, attempt) % VAL_SEED_START
                attempt += 1
                key = self._probe_key(seed)
                key = f"seed:{seed}" if key is None else key
                if key in keys or (not key.startswith("seed:") and is_held_out(key)):
                    misses += 1  # a validation state or one the pool has: draw again
                    continue
                misses = 0
                pool.append(seed)
                keys.add(key)
            if len(pool) < self.train_states:
                raise UsageError(
                    f"{self.env_name}: found only {len(pool)} distinct training states for "
                    f"env.train_states={self.train_states}. Fix: a smaller env.train_states"
                )
            self._pool = pool
        return list(self._pool)

    def validation_seeds(
        self,
        n_groups: int | None = None,
        offset: int = 0,
        progress: Callable[[int, int], Any] | None = None,
    ) -> list[int]:
        """Validation seeds ``offset .. offset + n - 1`` of the fixed validation list: the
        seeds from ``VAL_SEED_START`` on, in order, whose initial state is a validation
        state not already in the list (distinct STATES, as in the training pool; every
        seed of the range when the env has no state split).

        Finding them resets about :data:`HELD_OUT_EVERY` candidate seeds per validation
        seed, so a large ``offset`` takes a while (Sokoban 6x6: ~0.1 ms per reset, about
        a minute and a half for offset 100,000); ``progress(found, wanted)`` is called
        every :data:`SCAN_REPORT_EVERY` candidates meanwhile."""
        n = self.env_groups if n_groups is None else int(n_groups)
        if offset < 0 or n < 0:
            raise UsageError(
                f"validation seeds need offset >= 0 and a count >= 0, got offset={offset}, "
                f"n={n}. Fix: --seed-offset 0 (or another non-negative number)"
            )
        misses = 0
        while len(self._validation) < offset + n:
            seed = self._next_val_candidate
            if progress is not None and (seed - VAL_SEED_START) % SCAN_REPORT_EVERY == 0:
                progress(len(self._validation), offset + n)
            if seed >= 2 * VAL_SEED_START:
                raise UsageError(
                    f"offset {offset} + {n} runs past the validation range. Fix: a smaller "
                    "--seed-offset"
                )
            self._next_val_candidate += 1
            key = self._probe_key(seed)
            if key is not None and (not is_held_out(key) or key in self._validation_keys):
                # a training state, or a validation state the list has already: two seeds
                # can generate one room, and it must not count twice in a success rate
                misses += 1
                if misses >= MAX_DRAWS and not self._validation:
                    raise self._too_few_states("validation")
                if misses >= MAX_DRAWS:
                    raise UsageError(
                        f"{self.env_name}: only {len(self._validation)} distinct validation "
                        f"states ({MAX_DRAWS} seeds in a row gave no new one); asked for "
                        f"{offset + n}. Fix: fewer groups (ragen eval: a smaller --n, or a "
                        "larger --group-size, which plays each state several times; ragen "
                        "train: a smaller trainer.val_groups), or widen the env's state space"
                    )
                continue
            misses = 0
            if key is not None:
                self._validation_keys.add(key)
            self._validation.append(seed)
        return self._validation[offset : offset + n]

    def _too_few_states(self, split: str) -> UsageError:
        return UsageError(
            f"{self.env_name}: {MAX_DRAWS} seeds in a row gave no {split} state; the env has "
            "too few distinct initial states to hold 1 in "
            f"{HELD_OUT_EVERY} out. Fix: make its state_key() return None (split by seed "
            "range only), or widen its state space (env.config)"
        )

    def member_rng_seed(self, seed: int, member: int) -> int:
        """The dynamics seed of member ``member`` of the group started from ``seed``."""
        return derive_seed(self.seed, "member", seed, member)

    # -- episodes ----------------------------------------------------------------------
    def reset(self, group_seeds: list[int]) -> list[str]:
        """Reset every env: group g from ``group_seeds[g]``; return the observations."""
        group_seeds = [int(s) for s in group_seeds]
        if len(group_seeds) != self.env_groups:
            raise ValueError(
                f"got {len(group_seeds)} group seeds for {self.env_groups} env groups; "
                "pass one seed per group (seeds_for_step / validation_seeds)"
            )
        self.group_seeds = group_seeds

        def reset_one(i: int) -> str:
            g, m = divmod(i, self.group_size)
            seed = group_seeds[g]
            return self.envs[i].reset(seed, rng_seed=self.member_rng_seed(seed, m))

        indices = range(len(self.envs))
        if len(self.envs) > 1 and all(getattr(e, "concurrent_steps", False) for e in self.envs):
            # envs that wait on a network (remote envs): all resets in flight at once
            with ThreadPoolExecutor(min(len(self.envs), 64)) as pool:
                return list(pool.map(reset_one, indices))
        return [reset_one(i) for i in indices]

    def group_of(self, index: int) -> int:
        return index // self.group_size

    def close(self) -> None:
        for env in [*self.envs, self._probe]:
            env.close()
