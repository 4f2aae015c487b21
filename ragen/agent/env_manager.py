"""``env_groups x group_size`` environments with StarPO's seeding rules.

* Every member of a group starts from the same initial-state ``seed`` (so their
  returns are comparable: the group baseline of GRPO, the reward std of StarPO-S).
* Each member still draws its own stochastic outcomes: ``env.reset(seed, rng_seed=r)``
  with ``r = derive_seed(manager_seed, "member", seed, member)``, distinct per member
  (docs/ARCHITECTURE.md, "Pitfalls": stochastic rewards must not be shared by a whole group).
* Training seeds advance every step and come from ``[0, VAL_SEED_START)``;
  validation seeds come from the disjoint fixed range ``[VAL_SEED_START, 2*VAL_SEED_START)``.

Index of environment ``(group g, member m)`` in ``envs``: ``g * group_size + m``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from ragen.envs import make
from ragen.envs.base import Env, derive_seed

VAL_SEED_START = 10**9  # validation seeds start here; training seeds stay below


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
    ) -> None:
        """``env_name``: a registered name (``ragen.envs.make(env_name, **env_config)``) or
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
        self.envs: list[Env] = [
            factory(**self.env_config) for _ in range(self.env_groups * self.group_size)
        ]
        self.group_seeds: list[int] = []

    @property
    def num_envs(self) -> int:
        return len(self.envs)

    # -- seeds ----------------------------------------------------------------------
    def seeds_for_step(self, step: int) -> list[int]:
        """Training initial-state seeds of batch ``step``: fresh every step, below the
        validation range. ``seeds_for_step(s)`` is a pure function of ``(seed, s)``."""
        if step < 0:
            raise ValueError(f"step must be >= 0, got {step}")
        # Offset by the manager seed so two runs with different seeds see different rooms.
        base = (
            derive_seed("train-offset", self.seed) % (VAL_SEED_START // 2)
        ) + step * self.env_groups
        seeds = [(base + g) % VAL_SEED_START for g in range(self.env_groups)]
        assert all(0 <= s < VAL_SEED_START for s in seeds)
        return seeds

    def validation_seeds(self, n_groups: int | None = None, offset: int = 0) -> list[int]:
        """Fixed validation seeds ``VAL_SEED_START + offset + g``, disjoint from training."""
        n = self.env_groups if n_groups is None else int(n_groups)
        seeds = [VAL_SEED_START + offset + g for g in range(n)]
        assert all(VAL_SEED_START <= s < 2 * VAL_SEED_START for s in seeds)
        return seeds

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
        observations = []
        for i, env in enumerate(self.envs):
            g, m = divmod(i, self.group_size)
            seed = group_seeds[g]
            observations.append(env.reset(seed, rng_seed=self.member_rng_seed(seed, m)))
        return observations

    def group_of(self, index: int) -> int:
        return index // self.group_size

    def close(self) -> None:
        for env in self.envs:
            env.close()
