"""The update: ``algo.ppo_epochs`` passes of PPO over shuffled minibatches of a scored batch.

Each minibatch is one optimizer step per model, its gradient accumulated over token-budget
micro-batches whose losses all divide by the minibatch's denominator, so accumulation
equals one batch in every ``loss_agg_mode``. Before clipping, the gradients and the
minibatch's statistics go through the context's sync hook (``PhaseContext.sync``: a no-op
in one process, sums over ranks when data-parallel); a NaN/inf loss or gradient norm
stops the step before its optimizer step (:class:`~.nonfinite.NonFiniteUpdate`).

:func:`critic_update_pass` is the critic's update run first, its forward giving the values
and advantages (``ragen.trainer.onepass``); :func:`ppo_update` then trains the actor only.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence

import numpy as np
import torch

from ragen import algo
from ragen.batching import TrainingBatch, padding_fraction
from ragen.envs.base import derive_seed
from ragen.models.finite import nonfinite_loss
from ragen.progress import Progress

from . import advantages, forward, onepass
from .nonfinite import NonFiniteUpdate
from .phase_context import Micro, PhaseContext


def minibatch_generator(ctx: PhaseContext, step: int) -> torch.Generator:
    """The generator of step ``step``'s minibatch shuffles (seeded by ``trainer.seed``)."""
    return torch.Generator().manual_seed(derive_seed(ctx.cfg.trainer.seed, "minibatch", step))


def minibatch_order(ctx: PhaseContext, step: int, size: int, generator=None) -> list[int]:
    """The shuffled row order of an epoch of step ``step`` (the first epoch's without
    ``generator``)."""
    if generator is None:
        generator = minibatch_generator(ctx, step)
    return torch.randperm(size, generator=generator).tolist()


def ppo_update(
    ctx: PhaseContext,
    batch: TrainingBatch,
    step: int,
    critic_stats: dict[str, float] | None = None,
    old_from_update: bool = False,
) -> dict[str, float]:
    """``ppo_epochs`` passes over shuffled minibatches (the critic's: ``critic_epochs``);
    metrics of the whole update.

    ``critic_stats``: the metrics of a critic update that already ran this step
    (:func:`critic_update_pass`); the critic is then not trained again.
    ``old_from_update``: the actor's forward gives ``batch.old_log_prob`` as it goes
    (one epoch over one minibatch, ``ragen.trainer.onepass``).
    During ``trainer.critic_warmup`` (``step`` below it) only the critic trains."""
    a = ctx.cfg.algo
    train_actor = step >= ctx.cfg.trainer.critic_warmup
    B = batch.size
    lengths = batch.lengths.tolist()
    gen = minibatch_generator(ctx, step)
    sums: dict[str, list[float]] = defaultdict(list)
    for k, v in (critic_stats or {}).items():
        sums[k].append(v)
    pad_fracs = []
    critic_epochs = a.critic_epochs or a.ppo_epochs
    train_critic = ctx.models.critic is not None and critic_stats is None
    epochs = max(a.ppo_epochs, critic_epochs if train_critic else 0)
    minibatches = epochs * math.ceil(B / a.ppo_mini_batch_size)
    progress: Progress | None = None
    for epoch in range(epochs):
        perm = minibatch_order(ctx, step, B, gen)
        for start in range(0, B, a.ppo_mini_batch_size):
            rows = perm[start : start + a.ppo_mini_batch_size]
            micros = ctx.micro_batches(batch, rows)
            if progress is None:  # the update's passes, counted at the first minibatch's size
                models = max(int(train_actor) + int(train_critic), 1)
                progress = Progress("update", minibatches * len(micros) * models, "micro-batch")
            pad_fracs.append(padding_fraction(lengths, [ids for ids, _ in micros]))
            if train_actor and epoch < a.ppo_epochs:
                actor = actor_minibatch(ctx, batch, rows, micros, old_from_update, progress)
                for k, v in actor.items():
                    sums[k].append(v)
            if train_critic and epoch < critic_epochs:
                for k, v in critic_minibatch(ctx, batch, rows, micros, progress=progress).items():
                    sums[k].append(v)
    if progress is not None:
        progress.close()
    out = {}
    for k, values in sums.items():
        if k.endswith("grad_norm"):
            finite = [v for v in values if math.isfinite(v)]
            out[f"{k}_mean"] = float(np.mean(finite)) if finite else float("nan")
            out[f"{k}_max"] = float(np.max(values))
        elif k.endswith("skipped_steps"):
            out[k] = float(np.sum(values))
        else:
            out[k] = float(np.mean(values))
    out["perf/padding_fraction"] = float(np.mean(pad_fracs))
    return out


def critic_update_pass(ctx: PhaseContext, batch: TrainingBatch, step: int) -> dict[str, float]:
    """The critic's update on the whole batch (one minibatch, the micro-batches the
    update would use), its forward giving the values, advantages and returns of each
    micro-batch as it goes (``ragen.trainer.onepass``). Returns its update metrics."""
    rows = minibatch_order(ctx, step, batch.size)
    a = ctx.cfg.algo
    targets = onepass.CriticTargets(batch, lambda mb: advantages.estimate(a, mb))
    return critic_minibatch(ctx, batch, rows, ctx.micro_batches(batch, rows), targets)


def optimizer_step(
    ctx: PhaseContext, model, optimizer, prefix: str, nonfinite: str = ""
) -> dict[str, float]:
    """Sync, clip and step (or skip) one model's accumulated gradient. ``nonfinite``: the
    first NaN/inf loss of the minibatch, if any (the error names it)."""
    a = ctx.cfg.algo
    params = [p for p in model.parameters() if p.requires_grad]
    ctx.sync.grads(params)
    grad_norm = float(torch.nn.utils.clip_grad_norm_(params, a.grad_clip))
    if not math.isfinite(grad_norm):
        # NaN/inf never reaches the weights, and never passes silently: the step
        # stops here and the trainer saves its data (ragen.trainer.nonfinite)
        optimizer.zero_grad(set_to_none=True)
        raise NonFiniteUpdate(nonfinite or f"the {prefix}'s gradient norm is {grad_norm}")
    skip = a.skip_grad_norm_above is not None and grad_norm > a.skip_grad_norm_above
    if skip:
        # VAGEN-style safety: an exploding gradient skips the step (logged as
        # <prefix>/skipped_steps) instead of wrecking the weights.
        optimizer.zero_grad(set_to_none=True)
    else:
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    return {f"{prefix}/grad_norm": grad_norm, f"{prefix}/skipped_steps": float(skip)}


def _backward(ctx: PhaseContext, loss: torch.Tensor, what: str, model) -> str:
    """Back-propagate ``loss`` unless it is NaN/inf; returns what went wrong, if it did
    (sharded ranks back-propagate it anyway: their backward is a collective)."""
    problem = nonfinite_loss(loss, what, model)
    if not problem or ctx.sync.collective_backward:
        loss.backward()
    return problem


def actor_minibatch(
    ctx: PhaseContext,
    batch: TrainingBatch,
    rows: Sequence[int],
    micros: list[Micro],
    old_from_update: bool = False,
    progress: Progress | None = None,
) -> dict[str, float]:
    """One actor optimizer step on minibatch ``rows``, accumulated over ``micros``
    (``progress``: advanced once per micro-batch)."""
    a, m = ctx.cfg.algo, ctx.models
    temperature = ctx.cfg.rollout.temperature
    mode, norm = a.loss_agg_mode, ctx.loss_norm_constant
    denom = ctx.denominator(batch.response_mask[rows])
    total_tokens = float(batch.response_mask[rows].sum()) or 1.0
    m.actor.train()
    stats: dict[str, float] = defaultdict(float)
    nonfinite = ""
    if old_from_update and batch.old_log_prob is None:
        batch.old_log_prob = torch.zeros_like(batch.response_mask)
    for ids, mb in micros:
        if progress is not None:
            progress.advance()
        mask = mb.response_mask
        share = float(mask.sum()) / total_tokens  # this micro-batch's share of tokens
        with m.autocast:
            log_prob, entropy = forward.token_log_probs(
                m.actor,
                mb.input_ids,
                mb.attention_mask,
                temperature,
                mask,
                with_entropy=True,
                **ctx.vision_inputs(mb),
            )
        if old_from_update:  # the policy before this step is the one computing log_prob
            mb.old_log_prob = log_prob.detach().float()
            batch.old_log_prob[ids, : mask.shape[1]] = mb.old_log_prob
        pg_loss, pg_metrics = algo.get_policy_loss(a.policy_loss)(
            old_log_prob=mb.old_log_prob,
            log_prob=log_prob,
            advantages=mb.advantages,
            response_mask=mask,
            clip_ratio_low=a.clip_ratio_low,
            clip_ratio_high=a.clip_ratio_high,
            clip_ratio_c=a.clip_ratio_c,
            loss_agg_mode=mode,
            norm_constant=norm,
            denominator=denom,
        )
        entropy_term = algo.agg_loss(entropy, mask, mode, norm, denominator=denom)
        loss = pg_loss - a.entropy_coef * entropy_term
        if a.kl_coef > 0 and not a.kl_in_reward:
            kl = algo.kl_penalty(log_prob, mb.ref_log_prob, a.kl_type)
            kl_term = algo.agg_loss(kl, mask, mode, norm, denominator=denom)
            loss = loss + a.kl_coef * kl_term
            stats["actor/kl_loss"] += float(kl_term.detach())
        problem = _backward(ctx, loss, "actor loss", m.actor)
        if problem:  # optimizer_step stops the step
            nonfinite = nonfinite or problem
            continue
        # losses are parts of the minibatch loss already: they add up
        stats["actor/pg_loss"] += float(pg_loss.detach())
        stats["actor/entropy_loss"] += float(entropy_term.detach())
        # the logged entropy is a plain token mean whatever the loss aggregation, so
        # curves of algorithms with different loss_agg_mode compare directly
        stats["actor/entropy"] += float((entropy.detach() * mask).sum()) / total_tokens
        for k, v in pg_metrics.items():  # token means within the micro-batch
            stats[f"actor/{k}"] += share * float(v)
    stats.update(optimizer_step(ctx, m.actor, m.actor_opt, "actor", nonfinite))
    return ctx.sync.stats(dict(stats))


def critic_minibatch(
    ctx: PhaseContext,
    batch: TrainingBatch,
    rows: Sequence[int],
    micros: list[Micro],
    targets=None,
    progress: Progress | None = None,
) -> dict[str, float]:
    """One critic optimizer step on minibatch ``rows``: the value loss over the tokens
    the advantage recursion ran on (``advantage_mask``). ``targets``: called with each
    micro-batch's detached values before its loss, to set its ``values`` and
    ``returns`` from them (``ragen.trainer.onepass.CriticTargets``)."""
    a, m = ctx.cfg.algo, ctx.models
    mode, norm = a.loss_agg_mode, ctx.loss_norm_constant
    denom = ctx.denominator(batch.advantage_mask[rows])
    total_tokens = float(batch.advantage_mask[rows].sum()) or 1.0
    m.critic.train()
    stats: dict[str, float] = defaultdict(float)
    nonfinite = ""
    for ids, mb in micros:
        if progress is not None:
            progress.advance()
        with m.autocast:
            vpreds, final = forward.token_values(
                m.critic,
                mb.input_ids,
                mb.attention_mask,
                mb.advantage_mask,
                **ctx.vision_inputs(mb),
            )
        if targets is not None:
            targets(ids, mb, vpreds.detach(), final.detach())
        loss, v_metrics = algo.value_loss(
            vpreds=vpreds,
            returns=mb.returns,
            old_values=mb.values,
            response_mask=mb.advantage_mask,
            cliprange_value=a.value_clip,
            loss_agg_mode=mode,
            norm_constant=norm,
            denominator=denom,
        )
        problem = _backward(ctx, loss, "critic's value loss", m.critic)
        if problem:  # optimizer_step stops the step
            nonfinite = nonfinite or problem
            continue
        stats["critic/value_loss"] += float(loss.detach())
        share = float(mb.advantage_mask.sum()) / total_tokens
        for k, v in v_metrics.items():
            stats[f"critic/{k}"] += share * float(v)
    stats.update(optimizer_step(ctx, m.critic, m.critic_opt, "critic", nonfinite))
    return ctx.sync.stats(dict(stats))
