"""ragen environments: a tiny text-env contract, a registry and the built-in suite.

    >>> import ragen.envs as envs
    >>> env = envs.make("sokoban")
    >>> obs = env.reset(seed=0)
    >>> obs, reward, terminated, truncated, info = env.step("up")

The package's rooms:

* the contract and its tools, here: :mod:`~ragen.envs.base` (``Env``),
  :mod:`~ragen.envs.registry` (names -> env classes, the built-in registrations and
  plug-ins), :mod:`~ragen.envs.checker` (``check_env``), :mod:`~ragen.envs.facts` (what
  a grounded thought states) and :mod:`~ragen.envs.visual` (observations as pictures);
* :mod:`ragen.envs.games`: the environments written here (bandit, Sokoban, FrozenLake,
  countdown, sudoku, 2048, the 2x2 cube and the grids seen as pictures);
* :mod:`ragen.envs.adapters`: other libraries' worlds behind the same contract
  (gymnasium, TextArena, TextWorld, reasoning-gym, an OpenEnv server);
* :mod:`ragen.envs.serving.rules`: any env served over HTTP (ragen's protocol and OpenEnv's)
  and the client that plays a served one (``env=remote``);
* :mod:`~ragen.envs.cli`: ``ragen envs``, ``ragen play``, ``ragen serve-env``.

Every env here is registered by name with preset defaults (``make(name, **overrides)``);
a user's env plugs in by import path (``make("my_pkg.coin:CoinEnv")``), by file
(``"envs/coin.py:CoinEnv"``) or as an installed entry point of the group ``ragen.envs``
(:mod:`ragen.envs.registry`). See ``docs/ENVIRONMENTS.md`` for the knobs and for adding
your own.
"""

from .base import Env, derive_seed, make_info, normalize_action
from .registry import (
    ENTRY_POINT_GROUP,
    EnvSpec,
    check_name,
    check_options,
    config_keys,
    is_plugin,
    make,
    make_from_config,
    names,
    register,
    slug,
    spec,
)

__all__ = [
    "ENTRY_POINT_GROUP",
    "Env",
    "EnvSpec",
    "check_name",
    "check_options",
    "config_keys",
    "is_plugin",
    "derive_seed",
    "make",
    "make_from_config",
    "make_info",
    "names",
    "normalize_action",
    "register",
    "slug",
    "spec",
]
