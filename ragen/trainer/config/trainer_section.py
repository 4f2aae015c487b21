"""The ``trainer`` section: run control, validation, logs, the response to collapse,
step options and scale-out, one dataclass per group.

:class:`TrainerSection` is all of them at once, so every key stays ``trainer.KEY``
(``trainer.total_steps``, ``trainer.wandb``, ``trainer.rollout_workers``): users'
overrides and saved configs load as before. The groups only say which keys belong
together.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ragen.config_fields import fail, option
from ragen.trainer.collapse import ON_COLLAPSE, CollapseConfig
from ragen.trainer.metrics_logger import WANDB_MODES

from .rollback import parse_rollback_change


def _check_resume(value: str, key: str) -> None:
    if value not in ("never", "auto") and not Path(value).exists():
        fail(
            key,
            f"checkpoint {value!r} does not exist",
            "use auto, never, or an existing checkpoint folder",
        )


def _check_rollback_change(value: list[str], key: str) -> None:
    parse_rollback_change(value)


@dataclass
class RunControl:
    """How long the run goes, where it lives, what it keeps, and when it gives up."""

    total_steps: int = option(200, "training steps (rollout + update)", ge=1)
    max_minutes: float | None = option(
        None,
        "wall-clock budget: stop after the step that reaches this many minutes, "
        "validating and saving as at the last step (null: no limit)",
        gt=0,
        fix="null trains all trainer.total_steps; e.g. 30 stops after the step that passes "
        "30 minutes",
    )
    seed: int = option(0, "the run's seed: initial states, sampling, model init")
    run_name: str | None = option(None, "the run's name; null: <env>-<algo>")
    run_dir: str | None = option(None, "the run folder; null: runs/<run_name>")
    resume: str = option(
        "never",
        "never, auto (the run folder's last checkpoint, if any), or a checkpoint folder",
        check=_check_resume,
    )
    save_every: int = option(
        50,
        "save a checkpoint every N steps (0: only at the end)",
        ge=0,
        fix="use 0 to turn it off, or a positive integer",
    )
    keep_last: int | None = option(
        None, "keep only the newest N checkpoints; null: keep all", ge=1, fix="null keeps all"
    )
    max_consecutive_skipped_steps: int = option(
        3,
        "stop with an error after this many consecutive steps that trained nothing "
        "(context overflow on every episode, or a filter that keeps no group); 0: never",
        ge=0,
        fix="use 0 to turn it off, or a positive integer",
    )


@dataclass
class Validation:
    """Held-out validation during training (fixed seeds, disjoint from training)."""

    val_every: int = option(
        10,
        "validate every N steps (0: never)",
        ge=0,
        fix="use 0 to turn it off, or a positive integer",
    )
    val_groups: int = option(32, "validation episodes (fixed seeds, disjoint from training)", ge=1)
    val_temperature: float = option(
        0.5, "sampling temperature of validation", ge=0, fix="0 is greedy"
    )


@dataclass
class RunLogs:
    """What the run writes for people to read: trajectories, the console, TensorBoard, W&B."""

    save_trajectories: bool = option(
        True, "write trajectories/step_N.jsonl (and val_step_N.jsonl) for `ragen view`"
    )
    log_trajectories_every: int = option(
        1,
        "write the training trajectories of step 1, every N-th step and the last (0: none)",
        ge=0,
        fix="use 0 to turn it off, or a positive integer",
    )
    log_trajectories_max: int | None = option(
        128,
        "episodes written per step (whole groups, the first groups first); null: all",
        ge=1,
        fix="null writes every episode; trainer.save_trajectories=false writes none",
    )
    console: bool = option(True, "print one line per step")
    tensorboard: bool = option(True, "write TensorBoard events to the run folder")
    wandb: bool = option(False, "log to Weights & Biases")
    wandb_project: str = option("ragen", "the W&B project")
    wandb_mode: str = option(
        "offline",
        "the W&B mode: offline (works without a network), online or disabled",
        choices=WANDB_MODES,
    )


@dataclass
class CollapseResponse:
    """What an echo-trap warning (``ragen.trainer.collapse``) does, up to a rollback."""

    on_collapse: str = option(
        "warn",
        "what an echo-trap warning (ragen.trainer.collapse) does: warn, stop, or "
        "rollback to a checkpoint with trainer.rollback_change applied",
        choices=ON_COLLAPSE,
    )
    collapse: CollapseConfig = field(default_factory=CollapseConfig)
    rollback_change: list[str] = option(
        default_factory=lambda: ["model.actor_lr=*0.5"],
        help="rollback: the change applied after restoring the checkpoint, as key=value "
        "overrides; key=*0.5 scales the current value",
        check=_check_rollback_change,
    )
    max_rollbacks: int = option(
        2,
        "after this many rollbacks a warning only warns",
        ge=0,
        fix="use 0 to turn it off, or a positive integer",
    )
    rollback_to: str = option(
        "warning",
        "the checkpoint a rollback restores: the last one saved before the warning "
        "step (warning), or before the step the warned signal began to decline (onset)",
        choices=("warning", "onset"),
    )


@dataclass
class StepOptions:
    """How each step runs beyond the algorithm: critic warm-up, rollout reuse, the
    reasoning statistics, fused passes and bf16."""

    critic_warmup: int = option(
        0,
        "the first this many steps train the critic alone (the actor waits, its lr "
        "schedule too), so the value baseline has learned the states' values before it "
        "weighs a policy update (verl's trainer.critic_warmup); needs a critic",
        ge=0,
        fix="0 (the actor trains from the first step) or a positive integer",
    )
    rollout_reuse: int = option(
        1,
        "rollout freshness (the RAGEN paper's finding 5): each rollout's batch trains this "
        "many consecutive steps; 1: a fresh rollout every step; N: steps s+1..s+N-1 update "
        "again on step s's kept samples, advantages and behaviour log-probs (PPO's ratio "
        "and clip stay relative to the policy that sampled them)",
        ge=1,
        fix="1 (a fresh rollout every step) or a larger integer",
    )
    reasoning_samples: int = option(
        16,
        "reasoning/mutual_info (per sequence and per token), cond_entropy, retrieval_acc: "
        "every sample of the step scored under every distinct prompt, at most this many "
        "samples (drawn at random beyond it; 0: off; ragen.trainer.reasoning_stats)",
        ge=0,
        fix="use 0 to turn it off, or a positive integer",
    )
    fuse_passes: bool = option(
        True,
        "one forward per model where the step allows it (one PPO epoch over one "
        "minibatch): the update's forward gives the old log-probs, the critic's update "
        "forward the values (ragen.trainer.onepass, docs/SPEED.md); false: separate "
        "scoring passes, the same numbers",
    )
    bf16: bool = option(True, "autocast to bf16 where the device supports it (CUDA)")
    bf16_cpu: bool = option(
        False,
        "bf16 autocast on a CPU with bf16 instructions (avx512_bf16 / AMX) for the "
        "log-probs, values and update; generation stays float32",
    )


@dataclass
class ScaleOut:
    """Scale-out over Ray (docs/SCALING.md): rollout workers and data-parallel training ranks."""

    rollout_workers: int = option(
        0,
        "scale-out (docs/SCALING.md; pip install ragen[scale]): 0 plays rollouts in this "
        "process; N uses N Ray actors, each a shard of the groups (sampling is seeded per "
        "episode: any N gives the same trajectories)",
        ge=0,
        fix="0 plays rollouts in this process; N >= 1 uses N Ray actors",
    )
    worker_batch_groups: int = option(
        0,
        "at most this many groups in one generate batch on a rollout worker (0: its whole "
        "shard); bounds a worker's KV-cache memory, does not change the samples (sampling "
        "is seeded per episode, so 0, 1 or N workers give the same trajectories)",
        ge=0,
        fix="0 plays a worker's whole shard in one batch; e.g. 4 caps it at 4 groups",
    )
    train_ranks: int = option(
        1,
        "1 updates in this process; M >= 2 updates data-parallel on M torch.distributed ranks",
        ge=1,
    )
    train_sharding: str = option(
        "replicate",
        "with train_ranks > 1: replicate (every rank a full copy of weights, gradients and "
        "optimizer state) or fsdp (FSDP2: all three sharded over the ranks per decoder "
        "layer; needs rollout_workers >= 1, which hold the whole weights for generation)",
        choices=("replicate", "fsdp"),
    )
    ray_address: str | None = option(
        None, "the Ray cluster; null: $RAY_ADDRESS when set, else a local Ray instance"
    )
    worker_cpus: float = option(
        1.0,
        "Ray CPUs reserved per rollout worker / training rank",
        ge=0,
        fix="e.g. 1 (fractions share a device)",
    )
    worker_gpus: float | None = option(
        None,
        "Ray GPUs per worker / rank; null: 1 on CUDA, else 0",
        ge=0,
        fix="e.g. 1 (fractions share a device)",
    )


@dataclass
class TrainerSection(ScaleOut, StepOptions, CollapseResponse, RunLogs, Validation, RunControl):
    """Run control, validation, logs, the response to collapse, step options and
    scale-out: every group's keys, flat (``trainer.KEY``)."""

    # a dataclass lists its bases' fields from the last base to the first: the bases are
    # written in reverse so that run control comes first
