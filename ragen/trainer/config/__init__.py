"""Typed training configuration with composable presets and dotted CLI overrides.

    ragen train env=sokoban algo=starpo-s model=tiny trainer.total_steps=200 rollout.group_size=16

Resolution order (later wins):

1. the defaults of the section dataclasses (paper defaults, docs/ARCHITECTURE.md "Paper defaults");
2. the ``model`` preset (``ragen/configs/model/<name>.yaml``; any other value is a
   model path or hub id and sets ``model.path``);
3. the ``env`` preset (``ragen/configs/env/<name>.yaml`` if present, otherwise any
   registered environment name, which sets ``env.name``);
4. the ``algo`` preset (``ragen/configs/algo/<name>.yaml``);
5. ``config=path.yaml`` files, then dotted overrides ``section.key=value``.

:func:`load_config` returns a typed :class:`TrainConfig` (plain dataclasses). Unknown
keys, wrong types, unknown values of enumerated keys (checked against the modules that
consume them) and impossible combinations raise a one-line
:class:`~ragen.errors.ConfigError` naming the full key, the problem and the fix, before
anything expensive happens.

The rooms: each section in a module of its own (``model``, ``env``, ``algo``,
``trainer_section``; ``rollout`` is :class:`~ragen.agent.rollout.RolloutConfig`),
:class:`TrainConfig` (``train_config``), loading (``load``), the checks that involve
more than one key (``validation``), what a rollback may change (``rollback``) and what
the config prints about itself (``describe``: ``--help-config``, ``--print-config``,
docs/CONFIG.md). Each key's help, type, choices and range live on its field
(``option(default, help, choices=..., ge=...)``, ``ragen.config_fields``).
"""

from ragen.agent.rollout import RolloutConfig
from ragen.errors import ConfigError
from ragen.models.lora import LoraConfig
from ragen.trainer.collapse import CollapseConfig

from .algo import AlgoConfig, DynamicSamplingConfig, FilterConfig
from .env import CurriculumConfig, EnvSection
from .load import PRESET_DIR, changed_keys, load_config, preset_names, to_dict, to_yaml
from .model import ModelConfig
from .rollback import ROLLBACK_KEYS, parse_rollback_change
from .train_config import TrainConfig
from .trainer_section import TrainerSection
from .validation import INSTALL_HINT, apply_rollback_change, machine_memory, validate

__all__ = [
    "ConfigError",
    "LoraConfig",
    "ModelConfig",
    "CurriculumConfig",
    "EnvSection",
    "RolloutConfig",
    "FilterConfig",
    "DynamicSamplingConfig",
    "CollapseConfig",
    "AlgoConfig",
    "TrainerSection",
    "TrainConfig",
    "load_config",
    "validate",
    "preset_names",
    "to_yaml",
    "to_dict",
    "changed_keys",
    "apply_rollback_change",
    "parse_rollback_change",
    "ROLLBACK_KEYS",
    "PRESET_DIR",
    "INSTALL_HINT",
    "machine_memory",
]
