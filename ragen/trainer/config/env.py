"""The ``env`` section: which environment, its options, and which initial states train."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ragen import envs
from ragen.config_fields import option


@dataclass
class CurriculumConfig:
    """Train on initial states no harder than a level that rises with measured success
    (``Env.difficulty``: Sokoban's optimal solution length, FrozenLake's 1 - the
    solver's discounted chance). Off while ``start`` is null."""

    start: float | None = option(
        None, "the first difficulty level (e.g. 3 moves); null: no curriculum"
    )
    step: float = option(1.0, "how much the level rises each time it advances", gt=0)
    stop: float | None = option(None, "the highest level; past it every state is drawn")
    advance_at: float = option(
        0.6,
        "advance once the mean training success of the last `window` steps reaches this",
        gt=0,
        le=1,
    )
    window: int = option(3, "steps of training success averaged to decide an advance", ge=1)


@dataclass
class EnvSection:
    name: str = option(
        "sokoban",
        "a registered environment (`ragen envs` lists them), or your own Env class: "
        "package.module:Class, path/to/file.py:Class or an installed `ragen.envs` entry "
        "point (docs/ENVIRONMENTS.md)",
        check=envs.check_name,
    )
    config: dict[str, Any] = option(
        default_factory=dict,
        help="the env's own options, e.g. {dim_room: [8, 8]} (`ragen envs` lists each "
        "env's options)",
    )
    val_config: dict[str, Any] = option(
        default_factory=dict, help="options of the validation envs only, over env.config"
    )
    train_states: int = option(
        0,
        "0: a fresh training state per group and step; N: draw groups from a fixed pool "
        "of N distinct training states (validation states stay held out)",
        ge=0,
        fix="env.train_states=0 or a pool size such as 64",
    )
    curriculum: CurriculumConfig = field(default_factory=CurriculumConfig)
