"""The rollout phase of a step: play the step's episodes, then keep what can be trained.

* :func:`collect` -- the step's training episodes (round 0, then dynamic sampling's
  refills) and their ``rollout/*`` / ``reward/*`` / ``sampling/*`` metrics;
* :func:`filter_trainable` -- the StarPO-S group filter on RAW episode scores (never on
  normalized ones: docs/ARCHITECTURE.md, "Pitfalls"), then the episodes with tokens to
  train;
* :func:`prepare_batch` -- pad, normalize scores, place rewards: the
  :class:`~ragen.batching.TrainingBatch` the model phases fill in.

No model runs here except inside ``rollout`` (the trainer's: in this process, or on the
rollout workers); seeds derive from ``trainer.seed`` and the step, so a step replays.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch

from ragen import algo
from ragen.agent.metrics import rollout_metrics
from ragen.agent.trajectory import Trajectory
from ragen.batching import TrainingBatch, collate
from ragen.envs.base import derive_seed
from ragen.errors import ConfigError

from .credit import baseline_groups, place_rewards
from .dynamic_sampling import sample_informative

if TYPE_CHECKING:
    from .config import AlgoConfig, TrainConfig

# (env manager, initial-state seeds, temperature, sample seed) -> a RolloutResult
RolloutFn = Callable[[Any, list[int], float, int], Any]


@dataclass
class StepRollout:
    """What :func:`collect` played."""

    trajectories: list[Trajectory]  # every round's episodes (what the filter sees)
    first: list[Trajectory]  # round 0's: the batch any run would have rolled out
    stats: dict[str, float]  # round 0's rollout stats (tokens_per_s, context checks, scale/*)
    metrics: dict[str, float] = field(default_factory=dict)


def collect(rollout: RolloutFn, envs: Any, cfg: TrainConfig, step: int) -> StepRollout:
    """Step ``step``'s training episodes from ``envs`` (an ``EnvStateManager``)."""
    r, t, a = cfg.rollout, cfg.trainer, cfg.algo
    results = []  # each rollout of the step: round 0, then dynamic sampling's refills

    def rollout_round(n: int) -> list[Trajectory]:
        key = (step,) if n == 0 else (step, "refill", n)
        seed = derive_seed(t.seed, "rollout", *key)
        results.append(rollout(envs, envs.seeds_for_step(step, draw=n), r.temperature, seed))
        return results[-1].trajectories

    sampling: dict[str, float] = {}
    if a.dynamic_sampling.enabled:  # only groups whose episodes disagree (DAPO)
        d = a.dynamic_sampling
        trajectories, first, sampling = sample_informative(
            rollout_round, r.env_groups, r.group_size, d.on, d.max_rounds
        )
    else:
        trajectories = first = rollout_round(0)
    stats = results[0].stats
    # the reasoning rewards keep their own top-level keys (reward/grounding, ...);
    # the step's metrics are round 0's, the batch any run would have rolled out
    metrics = {
        k if k.startswith("reward/") else f"rollout/{k}": v
        for k, v in rollout_metrics(first, r.group_size).items()
    }
    metrics.update(sampling)
    return StepRollout(trajectories, first, stats, metrics)


def context_checks(stats: dict[str, float]) -> dict[str, float]:
    """The rollout's token-exactness checks of the context: both should stay 0
    (docs/ROLLOUT.md)."""
    return {
        f"rollout/{k}": float(stats.get(k, 0.0)) for k in ("context_inexact", "context_fallbacks")
    }


def filter_trainable(
    trajectories: list[Trajectory], a: AlgoConfig
) -> tuple[list[bool], list[Trajectory], dict[str, float]]:
    """``(keep, kept, metrics)``: the filter's verdict per episode, the kept episodes
    with response tokens (an episode whose very first prompt overflowed
    ``rollout.max_model_len`` has none), and ``filter/*`` metrics."""
    scores = torch.tensor([tr.episode_reward for tr in trajectories], dtype=torch.float32)
    index = torch.tensor([tr.group_id for tr in trajectories], dtype=torch.long)
    keep, filter_metrics = algo.filter_groups(
        scores,
        index,
        episode_ids=[tr.episode_id for tr in trajectories],  # a windowed episode counts once
        strategy=a.filter.strategy,
        value=a.filter.value,
        include_zero=a.filter.include_zero,
        metric=a.filter.metric,
        sample_values=filter_sample_values(trajectories, a.filter.metric),
    )
    verdict = keep.tolist()
    kept = [tr for tr, k in zip(trajectories, verdict) if k and tr.num_response_tokens > 0]
    return verdict, kept, {f"filter/{k}": float(v) for k, v in filter_metrics.items()}


def prepare_batch(
    trajectories: list[Trajectory], a: AlgoConfig, pad_id: int, device: torch.device
) -> TrainingBatch:
    """Pad, normalize scores, place rewards; everything on ``device``.

    A sample's score is its reward-to-go (the episode reward for a full-history
    sample; from its own turn on for a windowed one, later turns discounted by
    ``algo.window_gamma``), and its baseline group is :func:`baseline_groups`.
    """
    batch = collate(trajectories, pad_id)
    scores = torch.tensor(
        [tr.discounted_reward_to_go(a.window_gamma) for tr in trajectories],
        dtype=torch.float32,
    )
    batch.index = baseline_groups(trajectories, a.turn_baseline)
    if a.reward_placement == "trajectory":
        scores = algo.normalize_scores(
            scores, batch.index, grouping=a.norm_grouping, method=a.norm_method
        )
    batch.token_level_scores = place_rewards(
        trajectories, scores, tuple(batch.input_ids.shape), a.reward_placement
    )
    # the critic bootstraps V(s_end) where the return continues past the sample's end
    # (env-side truncation, context overflow; the budgets when not terminal)
    batch.bootstrap_mask = torch.tensor(
        [float(tr.continues_after_end(a.budget_is_terminal)) for tr in trajectories]
    )
    batch.advantage_mask = batch.response_mask.clone()
    if a.advantage_tokens == "response_and_turn_end":
        for i, tr in enumerate(trajectories):
            if tr.turn_close_mask:
                close = torch.tensor(tr.turn_close_mask, dtype=torch.float)
                batch.advantage_mask[i, : len(close)] += close
    return batch.to(device)


def stalled_error(cfg: TrainConfig, skipped: int, metrics: dict[str, float], reason: str):
    """The one-line :class:`ConfigError` after ``skipped`` consecutive steps that trained
    nothing; ``reason``: why the last one did not (``"filter"``: the filter kept no
    group; else every kept episode overflowed the context before its first response)."""
    r, f = cfg.rollout, cfg.algo.filter
    head = f"{skipped} consecutive steps trained nothing, so the run stops"
    tail = (
        "no checkpoint was written for them (trainer.max_consecutive_skipped_steps=0 never stops)"
    )
    if reason == "filter":
        std = metrics.get("filter/std_max_before", float("nan"))
        zero = "" if f.include_zero else ", set algo.filter.include_zero=true"
        return ConfigError(
            f"{head}: the StarPO-S filter (algo.filter.strategy={f.strategy}, "
            f"algo.filter.value={f.value}, algo.filter.include_zero={f.include_zero}) "
            f"kept no group (largest in-group reward std {std:.3g}). Fix: lower "
            f"algo.filter.value{zero}, or raise rollout.group_size for more varied "
            f"groups; {tail}"
        )
    rate = metrics.get("rollout/truncation_rate", float("nan"))
    return ConfigError(
        f"{head}: the context overflowed rollout.max_model_len={r.max_model_len} before "
        f"the first response of every kept episode (rollout/truncation_rate={rate:.3g}). "
        "Fix: raise rollout.max_model_len, or shorten the prompt (env config, "
        f"rollout.max_turns, rollout.context_window); {tail}"
    )


def filter_sample_values(trajectories: Sequence[Trajectory], metric: str) -> list[float] | None:
    """The per-sample values the StarPO-S filter ranks groups by, ``(B,)`` (else ``None``).

    * ``entropy``: the mean surprisal of the sampled tokens, ``-(1/|y|) sum_t log p(y_t)``
      from the generation log-probs -- an unbiased estimate of the mean token entropy that
      needs no extra forward pass (0 for a sample without response tokens);
    * ``length``: the number of sampled tokens.
    """
    if metric == "entropy":
        out = []
        for tr in trajectories:
            lps = [lp for lp, m in zip(tr.gen_logprobs, tr.response_mask) if m]
            out.append(-sum(lps) / len(lps) if lps else 0.0)
        return out
    if metric == "length":
        return [float(tr.num_response_tokens) for tr in trajectories]
    return None
