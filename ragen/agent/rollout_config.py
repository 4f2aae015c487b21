"""``RolloutConfig``: how episodes are played, the ``rollout`` section of a ``ragen train``
config (and of SFT data and evaluation): turns and actions, tokens and context, the
sampling, the reply format and its rule-checked rewards. Each key's help, choices and
range sit on its field (``ragen.config_fields.option``; docs/CONFIG.md is generated from
them). :func:`ragen.agent.rollout.run_rollout` plays by it.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, fields
from typing import Any

from ragen.config_fields import check_section, display_key, option
from ragen.errors import ConfigError

from . import prompts
from .context import TEMPLATE_STRATEGIES
from .reasoning import REASONING_FORMATS
from .reasoning_rewards import REASONING_REWARDS, applicable_rewards


def _check_separator(value: str, key: str) -> None:
    if not value or not value.strip():
        raise ConfigError(f"{key}: must be a visible string. Fix: e.g. '||'")


@dataclass
class RolloutConfig:
    """Knobs of a rollout (defaults: RAGEN v1, docs/ARCHITECTURE.md "Paper defaults").

    The one definition of them: ``ragen train``'s ``rollout.*`` section is this class,
    and eval, SFT and the demo build one. ``env_groups``/``group_size`` size the
    trainer's batch (its env manager); :func:`run_rollout` takes them from the manager.
    Each field's help, choices and range are its metadata (``ragen.config_fields``).
    """

    env_groups: int = option(
        8,
        "training only: prompt groups (distinct initial states) per step",
        ge=1,
    )
    group_size: int = option(
        16,
        "training only: rollouts per initial state (a group shares its seed)",
        ge=1,
    )
    max_turns: int = option(5, "turns per episode", ge=1)
    max_actions_per_turn: int = option(
        5,
        "actions executed from one answer (the rest are dropped)",
        ge=1,
    )
    max_actions_per_trajectory: int = option(
        10,
        "actions per episode; the episode ends when they are spent",
        ge=1,
    )
    max_new_tokens: int = option(400, "generation budget per turn (tokens)", ge=1)
    max_model_len: int = option(
        4096,
        "prompt + max_new_tokens must fit in this many tokens, else the episode ends "
        "as context_overflow",
        ge=1,
    )
    reasoning: str = option(
        "free_think",
        "how the reply reasons (ragen.agent.reasoning): no_think (<answer> only), free_think "
        "(<think>..</think><answer>..</answer>), or sections inside the thought that are "
        "checked against the env (grounding, world_modeling, grounding_world_modeling)",
        choices=REASONING_FORMATS,
    )
    grounding_reward: float = option(
        0.0,
        "weight of the grounding reward added to each turn's reward: the share of the "
        "<observation> facts true of the state (0 = scored and logged, not rewarded)",
        ge=0,
        fix="0 turns it off",
    )
    world_model_reward: float = option(
        0.0,
        "weight of the world-model reward: the <prediction> matches the intended next "
        "state (0 = scored and logged, not rewarded)",
        ge=0,
        fix="0 turns it off",
    )
    consistency_reward: float = option(
        0.0,
        "weight of the consistency reward: the thought names the answer's actions last "
        "(0 = scored and logged, not rewarded)",
        ge=0,
        fix="0 turns it off",
    )
    progress_reward: float = option(
        0.0,
        "potential-based progress shaping: w * (Phi(s') - Phi(s)) added to each turn's "
        "reward, Phi from the env's solver (Env.progress_potential); 0 = off; never shown "
        "in prompts",
        ge=0,
        fix="0 turns it off",
    )
    separator: str = option("||", "between actions inside <answer>", check=_check_separator)
    format_penalty: float = option(-0.1, "added to a badly formatted turn's reward")
    format_reward: float = option(0.0, "added to a well-formed turn's reward")
    context_window: int | None = option(
        None,
        "null: the whole history in one sample; k: the prompt keeps the last k turns "
        "and every turn is its own sample",
        ge=0,
        fix="null keeps the whole history, k keeps the last k turns",
    )
    temperature: float = option(1.0, "sampling temperature (0 = greedy)", ge=0, fix="0 is greedy")
    top_p: float = option(
        1.0,
        "nucleus sampling: keep the tokens of this much probability mass (1.0 = off)",
        gt=0,
        le=1,
        fix="1.0 is off",
    )
    top_k: int = option(0, "sample among the k likeliest tokens (0 = off)", ge=0, fix="0 is off")
    seed: int = option(0, "sampling seed of this rollout (the trainer sets it per rollout)")
    template_strategy: str = option(
        "auto",
        "how the chat template's glue between turns is found (ragen.agent.context)",
        choices=TEMPLATE_STRATEGIES,
    )
    prompt_style: str = option(
        "full",
        "full: the env's rules in the system prompt; compact: only the actions and "
        "the reply format",
        choices=prompts.PROMPT_STYLES,
    )
    max_env_error_share: float = option(
        0.25,
        "the share of a batch's episodes that may end by an env failure (an exception, "
        "a server that does not answer) before the rollout stops the run; 0 = any failure "
        "stops it, 1 = never stop (failed episodes are cut as truncated)",
        ge=0,
        le=1,
        fix="0.25 (default); 1 never stops the run",
    )

    def validate(self, prefix: str = "rollout.") -> None:
        """Raise :class:`~ragen.errors.ConfigError` naming ``<prefix><key>`` (``--key``
        for a command's flags), the problem and the fix: each key against its field's
        choices and range, then the keys that must agree."""
        check_section(self, prefix, what="choices")
        check_section(self, prefix, what="ranges")
        key = functools.partial(display_key, prefix)
        for name in REASONING_REWARDS:
            weight = self.reward_weights[name]
            if weight > 0 and name not in format_rewards(self.reasoning):
                raise ConfigError(
                    f"{key(name + '_reward')}={weight} has no effect with "
                    f"{key('reasoning')}={self.reasoning} (no {_REWARD_SECTION[name]} in the "
                    f"reply). Fix: set {key('reasoning')} to a format with it, or "
                    f"{key(name + '_reward')}=0"
                )
        if self.max_new_tokens >= self.max_model_len:
            raise ConfigError(
                f"{key('max_new_tokens')}: {self.max_new_tokens} must be below "
                f"{key('max_model_len')} ({self.max_model_len}), a single turn cannot exceed "
                f"the model context. Fix: lower {key('max_new_tokens')} or raise "
                f"{key('max_model_len')}"
            )

    @property
    def think(self) -> bool:
        """Whether the reply has a ``<think>`` block (every format but ``no_think``)."""
        return self.reasoning != "no_think"

    @property
    def reward_weights(self) -> dict[str, float]:
        """``{reward: weight}`` for :data:`REASONING_REWARDS`."""
        return {name: float(getattr(self, f"{name}_reward")) for name in REASONING_REWARDS}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RolloutConfig:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise KeyError(f"unknown rollout config key(s) {unknown}; known: {sorted(known)}")
        return cls(**d)


_REWARD_SECTION = {
    "grounding": "<observation> section",
    "world_model": "<prediction> section",
    "consistency": "<think> block",
}


def format_rewards(reasoning: str) -> tuple[str, ...]:
    """The reasoning rewards a reply format can earn with an env that has a state checker
    and a discrete action list."""
    return applicable_rewards(reasoning, ("any",), ["any"])
