"""``make demo``: an agent built from nothing learns to solve environments on a CPU.

Stages (each can be re-run alone with ``--stage``; results accumulate in
``<out>/results.json``):

    tiny     build the tiny tokenizer + Qwen2-style model (offline, seeded)
    sft      warm start per env: SFT on noisy expert (solver) trajectories
    rl       RL per env (StarPO-S; Dr.GRPO on FrozenLake), from the warm start
    eval     held-out validation seeds: random, oracle, warm start, after RL
    report   table (results.md) and learning curves (curves.png)

    python -m ragen.demo                       # everything, ~16 min on 2 CPU cores
    python -m ragen.demo --budget classic      # the earlier demo, ~8 min (no grid gains)
    python -m ragen.demo --stage rl --env sokoban
    python -m ragen.demo --budget toy          # seconds; what the end-to-end test runs
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import io
import json
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import ragen.envs as envs
from ragen.agent.evaluate import run_evaluation
from ragen.agent.metrics import success_by_state
from ragen.agent.reasoning import REASONING_FORMATS, SECTIONS, needs_facts
from ragen.agent.reasoning_rewards import REASONING_REWARDS
from ragen.agent.rollout import RolloutConfig, format_rewards
from ragen.cli_utils import parse_key_values
from ragen.errors import UsageError
from ragen.models.tiny import create_tiny, describe
from ragen.stats import Interval, paired_bootstrap
from ragen.viewer import build_site
from ragen.viz.report import upgrade_results, write_demo_report

DEFAULT_ENVS = ("bandit", "frozen_lake", "sokoban")
STAGES = ("tiny", "sft", "rl", "eval", "report")
#: evaluation samples at RAGEN's validation temperature
EVAL_TEMPERATURE = 0.5
#: what the results keep of each policy's evaluation (and its per-state outcomes)
EVAL_KEYS = ("success_rate", "reward_mean", "format_error_rate", "valid_action_rate")
#: validation groups per generate call in evaluation (512 FrozenLake or Sokoban prompts of
#: the tiny model fit in a few MB of KV cache; one batch is the fastest on 2 cores)
EVAL_BATCH = 512


def rl_gain(row: dict[str, Any]) -> Interval | None:
    """After RL minus the warm start on the same held-out states (``row``: one env's
    results with per-state outcomes), with its 95% paired-bootstrap interval; None when
    either evaluation is missing or was made before outcomes were kept per state."""
    before = row.get("warm start (SFT)", {}).get("per_state")
    after = row.get("after RL", {}).get("per_state")
    if not before or not after or len(before) != len(after):
        return None
    return paired_bootstrap([a - b for a, b in zip(after, before)])


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
SOKOBAN_SFT: dict[str, Any] = {**GRID_SFT, "epochs": 2}
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
        rl_steps={"bandit": 40, "frozen_lake": 60, "sokoban": 60},
        # one move per reply: RL and evaluation play what the warm start was scored on
        reasoning_by_env={"frozen_lake": "no_think", "sokoban": "no_think"},
        max_new_tokens_by_env={"frozen_lake": 16, "sokoban": 16},
        sft_overrides={"frozen_lake": FROZEN_LAKE_SFT, "sokoban": SOKOBAN_SFT},
        algo={"frozen_lake": "drgrpo"},
        env_groups_by_env={"frozen_lake": 64},
        group_size_by_env={"frozen_lake": 16},
        actor_lr={"frozen_lake": 5e-4, "sokoban": 1e-4},
        # every turn in one optimizer step (groups x episodes x 10 turns), and on
        # Sokoban the critic lr the grid study measured with (the trainer's default): the
        # tiny critic then stays near 0 (explained variance 0.00 over the run), so a
        # turn's advantage is in effect its reward-to-go, clipped PPO-style
        ppo_mini_batch_size={"frozen_lake": 10240, "sokoban": 640},
        critic_lr={"sokoban": 1e-5},
        rl_extra={"sokoban": DYNAMIC_SAMPLING},
    ),
    # the demo until the grids' warm start fitted (free_think replies, one SFT recipe for
    # every env, StarPO-S's top quarter): the budget the earlier experiments measured
    "classic": Budget(),
}
# the full pipeline in seconds (what the end-to-end test runs)
BUDGETS["toy"] = dataclasses.replace(
    BUDGETS["full"],
    sft_episodes={"bandit": 16, "frozen_lake": 8, "sokoban": 8},
    sft_epochs=1,
    sft_overrides={
        env: {**GRID_SFT, "epochs": 1, "batch_size": 8, "aux_episodes": 4, "heldout_episodes": 2}
        for env in ("frozen_lake", "sokoban")
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


class Demo:
    def __init__(
        self,
        out: Path,
        budget: Budget,
        envs: list[str],
        seed: int = 0,
        results: dict | None = None,
    ):
        self.out, self.budget, self.envs, self.seed = out, budget, envs, seed
        self.out.mkdir(parents=True, exist_ok=True)
        # a Demo handed its results (a worker process) leaves results.json to its parent
        self.persist = results is None
        self.results_path = out / "results.json"
        if results is not None:  # given by the parent process
            self.results = results
        else:
            self.results = upgrade_results(
                json.loads(self.results_path.read_text()) if self.results_path.exists() else {}
            )

    # -- helpers ---------------------------------------------------------------------
    def log(self, msg: str) -> None:
        print(f"[demo {time.strftime('%H:%M:%S')}] {msg}", flush=True)

    def save_results(self) -> None:
        if not self.persist:
            return
        # write-then-rename: a reader never sees a half-written file
        tmp = self.results_path.with_name(self.results_path.name + ".tmp")
        tmp.write_text(json.dumps(self.results, indent=2, sort_keys=True))
        os.replace(tmp, self.results_path)

    @property
    def tiny_dir(self) -> Path:
        return self.out / "tiny"

    def sft_dir(self, env: str) -> Path:
        return self.out / env / "sft"

    def rl_dir(self, env: str) -> Path:
        return self.out / env / "rl"

    def final_actor(self, env: str) -> Path | None:
        ckpts = sorted((self.rl_dir(env) / "checkpoints").glob("step_*[0-9]"))
        return ckpts[-1] / "actor" if ckpts else None

    def _require(self, path: Path, stage: str) -> None:
        if not path.exists():
            raise UsageError(
                f"{path} is missing; run the '{stage}' stage first (python -m ragen.demo --stage {stage})"
            )

    # -- stages ----------------------------------------------------------------------
    def stage_tiny(self) -> None:
        self.log(f"building the tiny model ({describe(self.budget.tiny_size)}) in {self.tiny_dir}")
        create_tiny(self.tiny_dir, size=self.budget.tiny_size, seed=self.seed)

    def stage_sft(self, env: str) -> None:
        from ragen.sft.config import SFTConfig  # deferred: ragen.sft.trainer imports torch
        from ragen.sft.trainer import run_sft

        self._require(self.tiny_dir / "config.json", "tiny")
        shape, b = ENV_SHAPE[env], self.budget
        cfg = SFTConfig(
            env=env,
            env_config=b.env_config(env),
            rollout=shape.rollout(b, env),
            episodes=b.sft_episodes[env],
            epsilon=b.sft_epsilon[env],
            labels=b.sft_labels.get(env, "expert"),
            epochs=b.sft_epochs,
            actions_per_turn=shape.actions_per_turn,
            seed=self.seed,
            lr=b.sft_lr,
            batch_size=b.sft_batch_size[env],
        )
        changes = b.sft_overrides.get(env, {})
        unknown = sorted(set(changes) - {f.name for f in dataclasses.fields(SFTConfig)})
        if unknown:
            raise UsageError(
                f"sft_overrides[{env!r}]: {unknown} are not SFTConfig fields "
                "(ragen.sft.config.SFTConfig). Fix: use its field names, e.g. lr, batch_size"
            )
        cfg = dataclasses.replace(cfg, **changes)
        if b.micro_token_budget is not None:
            cfg = dataclasses.replace(cfg, micro_token_budget=b.micro_token_budget)
        aux = (
            f" + {cfg.aux_episodes} in the {cfg.aux_reasoning} format" if cfg.aux_reasoning else ""
        )
        self.log(
            f"[{env}] SFT warm start on {cfg.episodes} noisy expert episodes "
            f"(epsilon={cfg.epsilon}, labels={cfg.labels}){aux}"
        )
        run_sft(str(self.tiny_dir), self.sft_dir(env), cfg, log=self.log)

    def mini_batch_size(self, env: str) -> int:
        """Samples per optimizer step: by default all StarPO-S keeps (a quarter of the
        step's episodes; windowed envs: their turns), one optimizer step per training step."""
        b = self.budget
        if env in b.ppo_mini_batch_size:
            return b.ppo_mini_batch_size[env]
        return (
            max(1, b.groups_of(env) * b.group_size_of(env) // 4)
            * ENV_SHAPE[env].samples_per_episode
        )

    def turns_of_work(self, env: str) -> int:
        """A rough size of ``env``'s pipeline: turns trained on in SFT and rolled in RL."""
        b, turns = self.budget, ENV_SHAPE[env].max_turns
        sft = b.sft_overrides.get(env, {})
        episodes = b.sft_episodes[env] + sft.get("aux_episodes", 0)
        rl = b.rl_steps[env] * b.groups_of(env) * b.group_size_of(env)
        return turns * (episodes * sft.get("epochs", b.sft_epochs) + rl)

    def stage_rl(self, env: str) -> None:
        import shutil

        # deferred: the trainer imports torch, which `ragen --help` need not wait for
        from ragen.trainer.config import load_config
        from ragen.trainer.starpo import StarPOTrainer

        self._require(self.sft_dir(env) / "config.json", "sft")
        if self.rl_dir(env).exists():
            shutil.rmtree(self.rl_dir(env))  # a re-run of this stage starts over
        b = self.budget
        steps = b.rl_steps[env]
        overrides = [
            *rollout_overrides(env, b),
            f"algo={b.algo_of(env)}",
            "model=tiny",  # the tiny preset's learning rates and lengths ...
            f"model.path={self.sft_dir(env)}",  # ... for this tiny:nano warm start
            f"rollout.env_groups={b.groups_of(env)}",
            f"rollout.group_size={b.group_size_of(env)}",
            f"algo.ppo_mini_batch_size={self.mini_batch_size(env)}",
            *([f"model.actor_lr={b.actor_lr[env]}"] if env in b.actor_lr else []),
            *([f"model.critic_lr={b.critic_lr[env]}"] if env in b.critic_lr else []),
            f"trainer.total_steps={steps}",
            f"trainer.val_every={max(1, steps // 4)}",
            f"trainer.val_groups={b.val_groups}",
            f"trainer.save_every={steps}",
            f"trainer.run_dir={self.rl_dir(env)}",
            f"trainer.seed={self.seed}",
            *b.extra,
            *(
                [f"algo.micro_token_budget={b.micro_token_budget}"]
                if b.micro_token_budget is not None
                else []
            ),
            *b.rl_extra.get(env, []),
        ]
        extra = f" ({', '.join(b.rl_extra[env])})" if b.rl_extra.get(env) else ""
        self.log(
            f"[{env}] {b.algo_of(env)}: {steps} steps of "
            f"{b.groups_of(env)}x{b.group_size_of(env)} rollouts{extra}"
        )
        StarPOTrainer(load_config(overrides)).train()

    def stage_eval(self, env: str) -> None:
        """Every policy on the same ``eval_episodes`` held-out states (one episode each,
        the same sampling seed), their per-state outcomes kept, and the RL gain as a
        paired difference over those states with its 95% bootstrap interval."""
        n = self.budget.eval_episodes
        shape = ENV_SHAPE[env]
        rollout = shape.rollout(self.budget, env)  # the same limits the agent trained under
        common = dict(
            env=env,
            n=n,
            temperature=EVAL_TEMPERATURE,
            max_turns=shape.max_turns,
            seed=self.seed,
            config=rollout,
            env_config=self.budget.env_config(env),
        )
        rows = self.results.setdefault(env, {})
        policies = {"random": "random", "oracle": "oracle"}
        if self.sft_dir(env).exists():
            policies["warm start (SFT)"] = str(self.sft_dir(env))
        actor = self.final_actor(env)
        if actor is not None:
            policies["after RL"] = str(actor)
        for name, model in policies.items():
            extra = {}
            if name in ("random", "oracle"):
                extra["actions_per_turn"] = shape.actions_per_turn
            played = run_evaluation(model, batch_groups=EVAL_BATCH, **common, **extra)
            metrics = played.metrics
            wins = success_by_state(played.trajectories)
            rows["states"] = sorted(wins)  # the held-out initial states, the same for all
            rows[name] = {
                **{k: metrics[k] for k in EVAL_KEYS if k in metrics},
                "episodes": len(wins),
                "per_state": [wins[s] for s in rows["states"]],
            }
            self.log(
                f"[{env}] {name:>20}: success {metrics['success_rate']:.1%} "
                f"reward {metrics['reward_mean']:+.3f} ({len(wins)} held-out states)"
            )
        gain = rl_gain(rows)
        if gain is not None:
            rows["rl_gain"] = gain.to_json()
            verdict = "above 0" if gain.low > 0 else "includes 0" if gain.high >= 0 else "below 0"
            self.log(
                f"[{env}] RL gain {gain.points().format()} points (after RL - warm start, "
                f"paired over {gain.n} held-out states, 95% bootstrap interval: {verdict})"
            )
        self.save_results()

    def stage_report(self) -> None:
        path = write_demo_report(
            self.out, self.results, self.envs, {env: self.rl_dir(env) for env in self.envs}
        )
        self.log(f"report: {path}")
        print((self.out / "results.md").read_text())

        index = build_site(self.out, self.out / "site")
        self.log(f"viewer: file://{index.resolve()} (or: ragen view {self.out} --serve)")

    def run_env(self, env: str, stages: list[str]) -> dict:
        """The per-env stages (sft, rl, eval) in order; returns ``results[env]``."""
        tic = time.perf_counter()
        for stage in stages:
            getattr(self, f"stage_{stage}")(env)
            self.log(f"[{env}] stage {stage} done ({time.perf_counter() - tic:.0f}s)")
        return self.results.get(env, {})

    def run(self, stages: list[str], jobs: int = 1) -> None:
        """``tiny``, then each env's pipeline (``jobs`` envs at a time), then ``report``.

        ``jobs > 1`` runs whole env pipelines in separate processes, each with an equal
        share of the CPU threads: the tiny models are too small for one process to keep
        several cores busy, so two single-threaded envs side by side finish sooner than
        two envs one after the other on two threads.
        """
        tic = time.perf_counter()
        if "tiny" in stages:
            self.stage_tiny()
        per_env = [s for s in stages if s in ("sft", "rl", "eval")]
        if per_env:
            if jobs > 1 and len(self.envs) > 1:
                self._run_envs_in_processes(per_env, jobs)
            else:
                for env in self.envs:
                    self.run_env(env, per_env)
        if "report" in stages:
            self.stage_report()
        self.log(f"demo done ({time.perf_counter() - tic:.0f}s elapsed)")

    def _run_envs_in_processes(self, stages: list[str], jobs: int) -> None:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor, as_completed

        jobs = min(jobs, len(self.envs))
        threads = max(1, (os.cpu_count() or 1) // jobs)
        self.log(f"running {len(self.envs)} envs, {jobs} at a time ({threads} thread(s) each)")
        ctx = multiprocessing.get_context("spawn")  # a clean torch in every worker
        failed: dict[str, BaseException] = {}
        with ProcessPoolExecutor(
            max_workers=jobs,
            mp_context=ctx,
            initializer=exit_with_parent,
            initargs=(os.getpid(),),
        ) as pool:
            futures = {
                pool.submit(
                    _env_worker,
                    self.out,
                    self.budget,
                    self.seed,
                    env,
                    stages,
                    threads,
                    self.results.get(env, {}),  # workers never read results.json
                ): env
                # the longest pipelines first: a short one then fills the core it frees
                for env in sorted(self.envs, key=self.turns_of_work, reverse=True)
            }
            for future in as_completed(futures):
                env = futures[future]
                try:
                    self.results[env] = future.result()
                except Exception as err:  # keep the other envs going and their numbers
                    failed[env] = err
                    self.log(f"[{env}] FAILED: {type(err).__name__}: {err}")
                    continue
                self.save_results()  # each env's numbers are kept as soon as it finishes
        if failed:
            names = ", ".join(sorted(failed))
            raise RuntimeError(
                f"the demo failed for {names} (the other envs' results are in "
                f"{self.results_path}); fix the error above and re-run only those: "
                + " ".join(f"--env {e}" for e in sorted(failed))
            ) from next(iter(failed.values()))


class _EnvTaggedStream(io.TextIOBase):
    """A worker's stdout: each whole line gets its env's tag, so the interleaved output of
    side-by-side envs stays readable. Not a terminal, so no live display fights another."""

    def __init__(self, stream: Any, tag: str) -> None:
        self.stream, self.tag, self._partial = stream, tag, ""

    def write(self, text: str) -> int:
        lines = (self._partial + text).split("\n")
        self._partial = lines.pop()
        for line in lines:  # the demo's own messages already name their env
            self.stream.write(f"{line}\n" if self.tag.strip() in line else f"{self.tag}{line}\n")
        self.stream.flush()
        return len(text)

    def flush(self) -> None:
        self.stream.flush()

    def isatty(self) -> bool:
        return False


def exit_with_parent(parent_pid: int, every_s: float = 0.5) -> None:
    """End this (worker) process soon after its parent dies.

    A parent stopped by Ctrl-C shuts its pool down, but one killed by SIGTERM or SIGKILL
    cannot, and its spawned workers would train on unseen, holding the cores. A daemon
    thread notices the parent is gone (this process gets a new parent) and exits.
    """
    import threading

    def watch() -> None:
        while os.getppid() == parent_pid:
            time.sleep(every_s)
        os._exit(1)

    threading.Thread(target=watch, name="exit-with-parent", daemon=True).start()


def _env_worker(
    out: Path,
    budget: Budget,
    seed: int,
    env: str,
    stages: list[str],
    threads: int,
    results: dict,
) -> dict:
    """One env's pipeline in a worker process (module-level so that it pickles)."""
    import torch

    # a pool worker runs several envs one after another: tag with this one only
    stream = sys.stdout.stream if isinstance(sys.stdout, _EnvTaggedStream) else sys.stdout
    sys.stdout = _EnvTaggedStream(stream, f"[{env}] ")
    torch.set_num_threads(threads)
    torch.manual_seed(seed)
    demo = Demo(out, budget, [env], seed, results={env: results} if results else {})
    return demo.run_env(env, stages)


def default_jobs(num_envs: int) -> int:
    """One env per CPU core, at most one process per env."""
    return max(1, min(num_envs, os.cpu_count() or 1))


def _parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m ragen.demo", description=__doc__.split("\n\n")[0])
    _add_args(p)
    return p.parse_args(argv)


def _add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", default="runs/demo", help="demo folder")
    p.add_argument(
        "--stage", choices=STAGES, action="append", help="run only these stages (repeatable)"
    )
    p.add_argument("--env", action="append", choices=DEFAULT_ENVS, help="only these environments")
    p.add_argument(
        "--budget",
        choices=sorted(BUDGETS),
        default="full",
        help="full: the demo (~16 min on 2 cores); classic: the earlier ~8-minute demo, "
        "whose RL adds nothing on the grids; toy: the full pipeline in seconds",
    )
    p.add_argument("--seed", type=int, default=0, help="seed of the model, data and training")
    p.add_argument(
        "--reasoning",
        default=None,
        help="the grids' reply format: no_think, free_think, grounding, world_modeling, "
        "grounding_world_modeling, for every env (default: the budget's; full: no_think on the "
        "grids, free_think on the bandit)",
    )
    p.add_argument(
        "--reasoning-reward",
        action="append",
        default=[],
        metavar="NAME=WEIGHT",
        help="RL weight of a reasoning reward: grounding, world_model or consistency "
        "(repeatable; default: none, the rewards are only logged)",
    )
    p.add_argument(
        "--micro-token-budget",
        type=int,
        default=None,
        help="padded tokens per micro-batch in SFT and RL (default: SFT's automatic budget, "
        "16384 in RL). The same gradient summed in another order: how a run on another CPU "
        "rounds, repeated on this one",
    )
    p.add_argument(
        "--jobs",
        type=int,
        default=None,
        help="envs trained side by side in separate processes "
        "(default: one per CPU core, at most one per env; 1 = one after another)",
    )


def budget_from_args(args: argparse.Namespace) -> Budget:
    """The ``--budget`` preset with ``--reasoning``, ``--reasoning-reward`` and
    ``--micro-token-budget`` applied."""
    budget = BUDGETS[args.budget]
    changes: dict[str, Any] = {}
    if getattr(args, "reasoning", None) is not None:
        if args.reasoning not in REASONING_FORMATS:
            raise UsageError(
                f"--reasoning {args.reasoning!r} is not a format; use one of "
                f"{', '.join(REASONING_FORMATS)}"
            )
        budget = budget.playing(args.reasoning)
    budget_tokens = getattr(args, "micro_token_budget", None)
    if budget_tokens is not None:
        if budget_tokens < 1:
            raise UsageError(
                f"--micro-token-budget must be >= 1, got {budget_tokens}. Fix: e.g. 8192"
            )
        changes["micro_token_budget"] = budget_tokens
    weights = parse_key_values(getattr(args, "reasoning_reward", []) or [], "--reasoning-reward")
    if weights:
        unknown = sorted(set(weights) - set(REASONING_REWARDS))
        if unknown:
            raise UsageError(
                f"--reasoning-reward: unknown reward(s) {unknown}; use {', '.join(REASONING_REWARDS)}"
            )
        bad = {k: v for k, v in weights.items() if not isinstance(v, (int, float)) or v < 0}
        if bad:
            raise UsageError(f"--reasoning-reward: weights must be numbers >= 0, got {bad}")
        changes["reasoning_rewards"] = {k: float(v) for k, v in weights.items()}
    return dataclasses.replace(budget, **changes) if changes else budget


def run(args: argparse.Namespace) -> int:
    import torch

    torch.manual_seed(args.seed)

    envs = args.env or list(DEFAULT_ENVS)
    demo = Demo(Path(args.out), budget_from_args(args), envs, args.seed)
    jobs = args.jobs if args.jobs is not None else default_jobs(len(envs))
    if jobs < 1:
        raise UsageError(f"--jobs must be >= 1, got {jobs}")
    demo.run(args.stage or list(STAGES), jobs=jobs)
    return 0


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "demo", help="the end-to-end CPU demo (tiny model -> SFT -> StarPO-S -> eval)"
    )
    _add_args(p)
    p.set_defaults(func=run)


def main(argv: list[str] | None = None) -> int:
    return run(_parse(argv))


if __name__ == "__main__":
    sys.exit(main())
