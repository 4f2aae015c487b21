"""The demo's recipes: how each env is played (:data:`ENV_SHAPE`) and how much work each
stage does (:class:`Budget`, :data:`BUDGETS`), with the measurements behind each choice.

``ragen.demo`` runs them; the experiments and benchmarks that repeat or vary the demo
import them from here, so a recipe has one home and its reasons stay beside it::

    from ragen.recipes import BUDGETS, ENV_SHAPE, rollout_overrides
    budget = BUDGETS["full"]                     # what `make demo` runs
    overrides = rollout_overrides("sokoban", budget)  # `ragen train` keys of its RL stage
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass, field
from typing import Any

import ragen.envs as envs
from ragen.agent.reasoning import SECTIONS, needs_facts
from ragen.agent.rollout import RolloutConfig, format_rewards


@dataclass(frozen=True)
class EnvShape:
    """How an env is played, the same in the SFT data, in RL and in evaluation."""

    max_turns: int
    actions_per_turn: int  # the expert's, and the limit the prompt states
    context_window: int | None  # None: the whole history in one sample; 0: current state only

    def rollout(self, budget: Budget, env: str = ""):
        """The :class:`~ragen.agent.rollout.RolloutConfig` of SFT data and evaluation
        (``ragen train`` gets the same knobs from :func:`rollout_overrides`)."""
        return RolloutConfig(
            max_turns=self.max_turns,
            max_actions_per_turn=self.actions_per_turn,
            context_window=self.context_window,
            max_new_tokens=budget.new_tokens(env),
            max_model_len=2048,
            prompt_style=budget.prompt_style,
            reasoning=budget.reasoning_of(env),
        )

    @property
    def samples_per_episode(self) -> int:
        """Training samples an episode can give: one, or one per turn when windowed."""
        return self.max_turns if self.context_window is not None else 1


# FrozenLake and Sokoban are fully observed: the current grid is the whole state, so each
# turn is prompted with it alone (context_window=0). A 1M-parameter model learns to read
# one grid at a fixed place in the prompt far sooner than to find the newest of several
# grids in a growing history, and a turn's sample is ~120 tokens instead of ~600.
# One action per turn: the expert's every move is then a function of what the model sees.
ENV_SHAPE = {
    "bandit": EnvShape(max_turns=1, actions_per_turn=1, context_window=None),
    "frozen_lake": EnvShape(max_turns=10, actions_per_turn=1, context_window=0),
    "sokoban": EnvShape(max_turns=10, actions_per_turn=1, context_window=0),
}


def rollout_overrides(env: str, budget: Budget | None = None) -> list[str]:
    """``ragen train`` overrides that play ``env`` with its demo shape (and, given a
    ``budget``, its reply format, token budget and reasoning-reward weights)."""
    shape = ENV_SHAPE[env]
    out = [
        f"env={env}",
        f"rollout.max_turns={shape.max_turns}",
        f"rollout.max_actions_per_turn={shape.actions_per_turn}",
    ]
    if budget is not None:
        out += [
            f"rollout.reasoning={budget.reasoning_of(env)}",
            f"rollout.max_new_tokens={budget.new_tokens(env)}",
            f"rollout.prompt_style={budget.prompt_style}",
        ]
        out += [f"rollout.{k}_reward={w}" for k, w in budget.reasoning_rewards_of(env).items()]
        out += [f"env.config.{k}={v}" for k, v in budget.env_config(env).items()]
    if shape.context_window is not None:
        out.append(f"rollout.context_window={shape.context_window}")
    return out


@dataclass
class Budget:
    """How much work each stage does. ``full`` is what ``make demo`` runs."""

    tiny_size: str = "nano"  # tiny:nano, 1.2M parameters: fast enough for a 2-core CPU
    # expert episodes for the warm start; the grids need many: the model learns to read
    # a grid only after several hundred SFT steps
    sft_episodes: dict[str, int] = field(
        default_factory=lambda: {"bandit": 512, "frozen_lake": 2048, "sokoban": 2048}
    )
    sft_epochs: int = 3
    # noisy expert: teaches the format, leaves the policy to RL. On the bandit the warm
    # start picks arms at random (epsilon 1): it learns only the format, and RL alone
    # must find the better arm from rewards.
    sft_epsilon: dict[str, float] = field(
        default_factory=lambda: {"bandit": 1.0, "frozen_lake": 0.1, "sokoban": 0.1}
    )
    # what SFT targets are: the solver's move in every visited state ("expert"; the
    # noise above picks the states, never the labels), or the move played ("played": the
    # bandit's random arms, so its warm start learns the format alone)
    sft_labels: dict[str, str] = field(
        default_factory=lambda: {"bandit": "played", "frozen_lake": "expert", "sokoban": "expert"}
    )
    rl_steps: dict[str, int] = field(
        default_factory=lambda: {"bandit": 40, "frozen_lake": 40, "sokoban": 40}
    )
    # actor lr per env (unset: the tiny preset's 3e-4). On the grids 3e-4 collapsed one
    # Sokoban seed in three (success 0 within 10 steps); 1e-4 holds.
    actor_lr: dict[str, float] = field(
        default_factory=lambda: {"frozen_lake": 1e-4, "sokoban": 1e-4}
    )
    # many distinct initial states per step (the paper's finding 5: diversity helps)
    env_groups: int = 16
    group_size: int = 4
    # the RL algorithm preset of one env (ragen/configs/algo); unset: starpo-s
    algo: dict[str, str] = field(default_factory=dict)
    # initial states per RL step of one env, over ``env_groups``
    env_groups_by_env: dict[str, int] = field(default_factory=dict)
    # samples per optimizer step, per env; unset: Demo.mini_batch_size's default
    ppo_mini_batch_size: dict[str, int] = field(default_factory=dict)
    val_groups: int = 64
    # held-out states per evaluation: 512 carry about ±2.2 points of sampling noise per
    # cell at 50% (128: ±4.4), so a gain of +5 is told from 0
    eval_episodes: int = 512
    max_new_tokens: int = 48  # per turn, in training and evaluation alike
    # the tiny model cannot read rules; the compact prompt halves every sequence
    prompt_style: str = "compact"
    sft_lr: float = 3e-3  # a model trained from scratch needs large steps
    sft_batch_size: dict[str, int] = field(
        default_factory=lambda: {"bandit": 16, "frozen_lake": 32, "sokoban": 32}
    )
    extra: list[str] = field(default_factory=list)  # more `ragen train` overrides
    # the env whose SFT runs first, alone on every thread, before the envs' pipelines go
    # side by side (Demo.run, jobs > 1): the one on the critical path. None: none first
    sft_first: str | None = None
    # padded tokens per forward/backward micro-batch in SFT and RL (None: SFT's automatic
    # budget, RL's model=tiny preset's). Another budget sums the same gradient in another
    # order: the float rounding of a run on another CPU, reproduced on this one
    micro_token_budget: int | None = None
    # the grids' reply format (ragen.agent.reasoning), in SFT data, RL and evaluation;
    # envs without a state checker (the bandit) keep free_think when it needs facts
    reasoning: str = "free_think"
    # RL weights of the rule-checked reasoning rewards ({"grounding": 0.5, ...}), for
    # the envs whose format earns them
    reasoning_rewards: dict[str, float] = field(default_factory=dict)
    # per-turn budget for the structured formats: a Sokoban thought stating its state
    # and prediction is ~50 tokens of the tiny tokenizer, against ~15 for free_think
    structured_max_new_tokens: int = 96
    # the grids' observation format (grid, coord, grid_coord; ragen.envs.facts)
    observation_format: str = "grid"
    # -- per-env settings over the shared ones above ------------------------------------
    # the reply format of one env, over ``reasoning``
    reasoning_by_env: dict[str, str] = field(default_factory=dict)
    # ``rollout.max_new_tokens`` of one env, over the format's default
    max_new_tokens_by_env: dict[str, int] = field(default_factory=dict)
    # SFTConfig fields of one env over the sft_* above (ragen.sft.config.SFTConfig)
    sft_overrides: dict[str, dict[str, Any]] = field(default_factory=dict)
    # episodes per initial state of one env, over ``group_size``
    group_size_by_env: dict[str, int] = field(default_factory=dict)
    # critic lr of one env (unset: the tiny preset's 1e-3)
    critic_lr: dict[str, float] = field(default_factory=dict)
    # more `ragen train` overrides of one env, after ``extra``
    rl_extra: dict[str, list[str]] = field(default_factory=dict)

    def env_config(self, env: str) -> dict[str, Any]:
        """The env's own config keys the budget sets (the grids' observation format)."""
        if self.observation_format != "grid" and _has_facts(env):
            return {"observation_format": self.observation_format}
        return {}

    def playing(self, fmt: str) -> Budget:
        """This budget with every env playing reply format ``fmt`` (the per-env formats
        and their token budgets give way)."""
        return dataclasses.replace(
            self, reasoning=fmt, reasoning_by_env={}, max_new_tokens_by_env={}
        )

    def group_size_of(self, env: str) -> int:
        """Episodes per initial state in ``env``'s RL steps."""
        return self.group_size_by_env.get(env, self.group_size)

    def groups_of(self, env: str) -> int:
        """Initial states per RL step of ``env``."""
        return self.env_groups_by_env.get(env, self.env_groups)

    def algo_of(self, env: str) -> str:
        """``env``'s RL algorithm preset."""
        return self.algo.get(env, "starpo-s")

    def reasoning_of(self, env: str) -> str:
        """The reply format ``env`` is played with."""
        fmt = self.reasoning_by_env.get(env, self.reasoning)
        if needs_facts(fmt) and not _has_facts(env):
            return "free_think"
        return fmt

    def new_tokens(self, env: str) -> int:
        """``rollout.max_new_tokens`` for ``env``'s reply format."""
        if env in self.max_new_tokens_by_env:
            return self.max_new_tokens_by_env[env]
        if SECTIONS[self.reasoning_of(env)]:
            return max(self.max_new_tokens, self.structured_max_new_tokens)
        return self.max_new_tokens

    def reasoning_rewards_of(self, env: str) -> dict[str, float]:
        """The reward weights that apply to ``env``'s format (the others are dropped)."""
        allowed = format_rewards(self.reasoning_of(env))
        return {k: w for k, w in self.reasoning_rewards.items() if k in allowed}


@functools.cache  # one env construction per name, not one per question
def _has_facts(env: str) -> bool:
    """Whether registered env ``env`` has a state checker (``Env.fact_kinds``)."""
    return bool(envs.make(env).fact_kinds)


# The grids' warm start that fits on every seed (experiments/grids, preset tiny-cpu-aux):
# a from-scratch model either leaves its SFT loss plateau (always the most common move) or
# stays on it, by init seed. Larger steps with a shorter second-moment memory (lr 2e-3,
# beta2 0.95, 5% warm-up, 64 sequences a step) and as many episodes again of an auxiliary
# reply in which the expert first states player, goal and boxes by coordinates (a dense
# target for reading the grid; RL and evaluation play the plain no_think reply) made all
# three seeds leave it on both grids. The held-out slice measures the fit every epoch.
GRID_SFT: dict[str, Any] = {
    "lr": 2e-3,
    "adam_beta2": 0.95,
    "warmup_frac": 0.05,
    "batch_size": 64,
    "aux_reasoning": "grounding",
    "aux_episodes": 2048,
    "heldout_episodes": 256,
}
# Sokoban's warm start stops after two of those epochs: it then leaves RL room (26-41%
# held-out, where three epochs gave 42-57%), RL adds more on it in fewer steps, and its
# SFT, the demo's longest stage, is a third shorter. FrozenLake keeps three: after two,
# two seeds of three had not yet learned to read the lake (26% and 20%, random play 23%).
# (experiments/learning/demo-fast.yaml measured both grids at two epochs.)
# A run still on the loss plateau after those two epochs trains two more (training reply
# accuracy 0.20 where the demo's seeds read 0.48-0.55, and a warm start that played as
# random play does: seed 0 at --micro-token-budget 4096, where RL then added +2.5). Two
# more one-epoch schedules took it to 0.75 and 37% held-out, and RL from there added +7.6
# (one extra epoch: 0.50, 21%, +3.3; experiments/demo_seeds/probes/). Runs off the
# plateau are unchanged.
SOKOBAN_SFT: dict[str, Any] = {**GRID_SFT, "epochs": 2, "end_fit_min_reply_accuracy": 0.4}
# FrozenLake's SFT stops once the warm start solves 40% of its own SFT states (checked
# every 20 optimizer steps on 128 of them at temperature 0.5; the held-out states are
# never looked at). Three full epochs left warm starts at 45-66% and RL from every one of
# them ended at 63-65%: the seed that started near that ceiling gained nothing. Stopped at
# 40%, the warm starts sat at 41-43% held-out on three seeds and RL added +12 to +15
# (experiments/grids/configs/demo-fl-stop*.yaml).
FROZEN_LAKE_SFT: dict[str, Any] = {
    **GRID_SFT,
    "stop_at_success": 0.4,
    "success_check_every": 20,
    "success_check_episodes": 128,
}
# DAPO's dynamic sampling: only groups whose episodes disagree are trained on, refilled
# from fresh states until the step has its 16 groups. On Sokoban it was the one variant
# that added over 3 seeds (all groups and StarPO-S's top quarter did not).
DYNAMIC_SAMPLING = ["algo.filter.value=1.0", "algo.dynamic_sampling.enabled=true"]
# Sokoban's RL: dynamic sampling with Dr.GRPO's group baseline for 130 steps at lr 1e-4.
# With StarPO-S's critic (which explained none of the return variance: a turn's advantage
# was in effect its reward-to-go) the demo's 60 steps added +3.3 to +6.6 and the gain was
# still rising at step 60; without the critic a step costs about a third less, and 100
# steps from the same warm starts added +5.5 to +11.9 on three seeds
# (experiments/grids/configs/demo-sk-ds.yaml; at lr 2e-4, +4.3 to +14.8). The demo's own
# 100 steps gave one seed +3.5; its runs resumed to step 125 read +6.6, +14.6, +7.0 and at
# 150 +9.8, +13.9, +7.4 (experiments/demo_seeds/probes/sokoban_steps.json), while twice the
# groups or twice the episodes per group for 70 steps did not lift that seed
# (experiments/grids/configs/demo-sk-g32.yaml, demo-sk-g8.yaml). 130 steps keep the demo
# under 20 minutes: each costs ~5 s on one core, and Sokoban is the demo's longest job.

# FrozenLake: what adds from warm starts that fit is the number of episodes each update
# trains on. 64 groups x 16 = 1,024 episodes a step, every group, Dr.GRPO's group
# baseline (StarPO-S's critic explained none of the return variance there) and one
# optimizer step per step at lr 5e-4 (at 1e-4 the update moved too little in 40 steps;
# at 3e-4 the gain came late, still rising at step 60; at 1e-3 it first fell 10
# points). Affordable on one core since the update packs the rows that share a prompt
# together: 9 s a step. (The drgrpo preset keeps every group.)

BUDGETS = {
    # what `make demo` runs: the grids with the warm start that fits and RL where it adds
    "full": Budget(
        rl_steps={"bandit": 40, "frozen_lake": 60, "sokoban": 130},
        # one move per reply: RL and evaluation play what the warm start was scored on
        reasoning_by_env={"frozen_lake": "no_think", "sokoban": "no_think"},
        max_new_tokens_by_env={"frozen_lake": 16, "sokoban": 16},
        sft_overrides={"frozen_lake": FROZEN_LAKE_SFT, "sokoban": SOKOBAN_SFT},
        algo={"frozen_lake": "drgrpo", "sokoban": "drgrpo"},
        env_groups_by_env={"frozen_lake": 64},
        group_size_by_env={"frozen_lake": 16},
        actor_lr={"frozen_lake": 5e-4, "sokoban": 1e-4},
        # every turn in one optimizer step (groups x episodes x 10 turns)
        ppo_mini_batch_size={"frozen_lake": 10240, "sokoban": 640},
        rl_extra={"sokoban": DYNAMIC_SAMPLING},
        # Sokoban's pipeline is the longest (seed 0, one thread: SFT 6.4 + RL 11.2 min,
        # against FrozenLake's 2.9 + 8.8 and the bandit's ~1): its SFT on both cores first
        sft_first="sokoban",
    ),
    # the demo until the grids' warm start fitted (free_think replies, one SFT recipe for
    # every env, StarPO-S's top quarter): the budget the earlier experiments measured
    "classic": Budget(),
}
# the grids' SFT at the toy budget
TOY_GRID_SFT: dict[str, Any] = {
    **GRID_SFT,
    "epochs": 1,
    "batch_size": 8,
    "aux_episodes": 4,
    "heldout_episodes": 2,
}
# the full pipeline in seconds (what the end-to-end test runs)
BUDGETS["toy"] = dataclasses.replace(
    BUDGETS["full"],
    sft_episodes={"bandit": 16, "frozen_lake": 8, "sokoban": 8},
    sft_epochs=1,
    sft_overrides={
        "frozen_lake": {**TOY_GRID_SFT},
        # Sokoban's fit floor as in the full recipe: a toy model never reaches it, so
        # the end-to-end test runs the extra epochs too
        "sokoban": {**TOY_GRID_SFT, "end_fit_min_reply_accuracy": 0.4},
    },
    rl_steps={"bandit": 2, "frozen_lake": 2, "sokoban": 2},
    env_groups=2,
    group_size=2,
    val_groups=2,
    eval_episodes=4,
    max_new_tokens=16,
    group_size_by_env={},
    env_groups_by_env={},
    ppo_mini_batch_size={},
    extra=["algo.ppo_mini_batch_size=2"],
)
