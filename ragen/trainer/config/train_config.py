"""A run's whole config: its five sections, each in a module of its own (the ``rollout``
section is the rollout's own :class:`~ragen.agent.rollout.RolloutConfig`, which SFT,
eval and the demo use too)."""

from __future__ import annotations

from dataclasses import dataclass, field

from ragen.agent.rollout import RolloutConfig

from .algo import AlgoConfig
from .env import EnvSection
from .model import ModelConfig
from .trainer_section import TrainerSection


@dataclass
class TrainConfig:
    """What ``ragen train`` runs: ``model``, ``env``, ``rollout``, ``algo``, ``trainer``."""

    model: ModelConfig = field(default_factory=ModelConfig)
    env: EnvSection = field(default_factory=EnvSection)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    algo: AlgoConfig = field(default_factory=AlgoConfig)
    trainer: TrainerSection = field(default_factory=TrainerSection)
