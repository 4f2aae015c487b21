"""Scoring: the forward passes without gradients between a step's rollout and its update.

* :func:`compute_old_log_probs` -- ``old_log_prob`` (the policy before the update),
  ``ref_log_prob`` (the frozen reference, with a KL term) and ``old_entropy`` (with
  ``algo.pg_min_entropy``), recomputed by the training model on the sampled ids;
* :func:`compute_values` -- the critic's ``values`` on the advantage mask and
  ``final_values`` (V of each whole row, the bootstrap value);
* :func:`reasoning_stats` -- the step's ``reasoning/*`` metrics (one more forward).

Each runs over the micro-batches :meth:`PhaseContext.micro_batches` deals it, so on
data-parallel ranks each scores its share of the rows (``ragen.distributed``).
"""

from __future__ import annotations

import torch

from ragen import algo
from ragen.agent.trajectory import Trajectory
from ragen.batching import TrainingBatch
from ragen.envs.base import derive_seed
from ragen.models.vlm import is_processor
from ragen.progress import Progress

from . import forward
from .phase_context import PhaseContext
from .reasoning_stats import reasoning_stats as thought_stats


def logprob_agreement(batch: TrainingBatch) -> dict[str, float]:
    """How far the trainer's old log-probs are from the generation's, on sampled ids.

    Generation and training use the same weights; a gap here means a numerical or
    template mismatch between the engine and the trainer, or a rollout worker holding
    other weights (worth a look if large)."""
    mask = batch.response_mask
    diff = (batch.old_log_prob - batch.gen_log_prob).abs()
    return {
        "actor/gen_logprob_abs_diff": float(algo.masked_mean(diff, mask)),
        "actor/gen_logprob_max_diff": float((diff * mask).max()),
    }


def score_batch(ctx: PhaseContext, batch: TrainingBatch, metrics: dict[str, float]) -> None:
    """The batch's scores before advantages: old (and reference) log-probs, and the
    critic's values when there is a critic; ``actor/gen_logprob_*`` into ``metrics``."""
    compute_old_log_probs(ctx, batch, metrics)
    if ctx.models.critic is not None:
        compute_values(ctx, batch)


@torch.no_grad()
def compute_old_log_probs(
    ctx: PhaseContext, batch: TrainingBatch, metrics: dict[str, float]
) -> None:
    """old_log_prob (and ref_log_prob when KL is on), recomputed by the training model."""
    m = ctx.models
    temperature = ctx.cfg.rollout.temperature
    old = torch.zeros_like(batch.response_mask)
    ref = torch.zeros_like(old) if ctx.cfg.algo.kl_coef > 0 else None
    want_entropy = ctx.cfg.algo.pg_min_entropy > 0
    ent = torch.zeros_like(old) if want_entropy else None
    m.actor.eval()
    micros = ctx.micro_batches(batch)
    progress = Progress("old log-probs", len(micros), "micro-batch")
    for rows, mb in micros:
        progress.advance()
        L = mb.input_ids.shape[1]
        with m.autocast:
            lp, h = forward.token_log_probs(
                m.actor,
                mb.input_ids,
                mb.attention_mask,
                temperature,
                mb.response_mask,
                with_entropy=want_entropy,
                **ctx.vision_inputs(mb),
            )
            old[rows, :L] = lp
            if ent is not None:
                ent[rows, :L] = h
            if ref is not None:
                ref[rows, :L] = _ref_log_probs(ctx, mb, temperature)
    progress.close()
    batch.old_log_prob, batch.ref_log_prob, batch.old_entropy = old, ref, ent
    metrics.update(logprob_agreement(batch))


def _ref_log_probs(ctx: PhaseContext, mb: TrainingBatch, temperature: float) -> torch.Tensor:
    m = ctx.models
    args = (mb.input_ids, mb.attention_mask, temperature, mb.response_mask)
    vision = ctx.vision_inputs(mb)
    if m.use_lora:
        # the reference is the base model: the same weights with the adapters off
        with m.actor.disable_adapter():
            return forward.token_log_probs(m.actor, *args, **vision)[0]
    return forward.token_log_probs(m.ref, *args, **vision)[0]


@torch.no_grad()
def compute_values(ctx: PhaseContext, batch: TrainingBatch) -> None:
    """``batch.values``: the critic's V(prefix before token t) on the advantage mask
    (the response tokens, plus turn-close tokens under M_adv), and
    ``batch.final_values``: V of each whole row, the bootstrap value."""
    m = ctx.models
    values = torch.zeros_like(batch.response_mask)
    final = torch.zeros(batch.size, device=values.device)
    m.critic.eval()
    micros = ctx.micro_batches(batch)
    progress = Progress("values", len(micros), "micro-batch")
    for rows, mb in micros:
        progress.advance()
        with m.autocast:
            v, f = forward.token_values(
                m.critic,
                mb.input_ids,
                mb.attention_mask,
                mb.advantage_mask,
                **ctx.vision_inputs(mb),
            )
        values[rows, : mb.input_ids.shape[1]] = v
        final[rows] = f
    progress.close()
    batch.values = values * batch.advantage_mask
    batch.final_values = final


def reasoning_stats(
    ctx: PhaseContext, trajectories: list[Trajectory], step: int
) -> dict[str, float]:
    """``reasoning/cond_entropy``, ``reasoning/mutual_info``, ...: does the thought still
    depend on the prompt? (``ragen.trainer.reasoning_stats``; empty for a VLM, whose
    cross-prompt scoring does not carry pictures yet)."""
    m, c = ctx.models, ctx.cfg
    if is_processor(m.tokenizer):
        return {}
    with m.autocast:
        return thought_stats(
            m.actor,
            m.tokenizer,
            trajectories,
            c.trainer.reasoning_samples,
            m.pad_id,
            c.rollout.temperature,
            m.device,
            seed=derive_seed(c.trainer.seed, "reasoning_stats", step),
        )
