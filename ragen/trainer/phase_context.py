"""What the model phases of a step read, who runs them, and the hook data parallelism
plugs into.

:class:`PhaseContext` is the one argument of every model phase (``ragen.trainer.scoring``,
``ragen.trainer.update``): the config, the models (:class:`~.models.TrainModels`) and a
:class:`RankSync`. The phases never ask whether they run alone: they pack the rows
:meth:`PhaseContext.micro_batches` gives them, and hand their gradients and minibatch
statistics to the sync hook before using them.

:class:`RankSync` itself is the one-process hook: every rank's share is all of it, and
nothing is summed. ``ragen.distributed.data_parallel`` implements it for a group of
torch.distributed ranks (rows dealt by tokens, gradients and statistics summed).

:class:`ModelPhases` is who runs the model phases of a step as the loop calls them:
the trainer itself (``StarPOTrainer.phases()``) or the rank group
(``ragen.distributed.data_parallel.DataParallelUpdater``).
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import torch

from ragen import algo
from ragen.batching import TrainingBatch, micro_batches
from ragen.models.vlm import forward_inputs, row_images

if TYPE_CHECKING:
    from ragen.agent.trajectory import Trajectory

    from .config import TrainConfig
    from .models import TrainModels

Micro = tuple[list[int], TrainingBatch]  # (row ids in the batch, the micro-batch)


class RankSync:
    """The gradient/statistics sync hook of the model phases; this base class is one
    process (every method a no-op). A data-parallel implementation overrides all of it.

    ``collective_backward``: whether every backward must run even for a NaN/inf loss
    (sharded ranks: the backward's gradient reduction is a collective, and the NaN
    gradient then stops every rank alike)."""

    collective_backward = False

    def rows(self, batch: TrainingBatch, rows: Sequence[int], scoring: bool) -> list[int]:
        """This rank's share of ``rows`` (``scoring``: the whole batch, being scored)."""
        return list(rows)

    def pad(self, micros: list[Micro], batch: TrainingBatch, scoring: bool) -> list[Micro]:
        """``micros`` padded to the micro-batch count every rank runs."""
        return micros

    def grads(self, params: list[torch.nn.Parameter]) -> None:
        """Make ``p.grad`` the gradient of the whole minibatch, before clipping."""

    def stats(self, stats: dict[str, float]) -> dict[str, float]:
        """A minibatch's statistics (this rank's parts) as the whole minibatch's."""
        return stats


@dataclass
class PhaseContext:
    """The config, the models and the sync hook; see the module doc."""

    cfg: TrainConfig
    models: TrainModels
    sync: RankSync = field(default_factory=RankSync)

    def micro_batches(self, batch: TrainingBatch, rows: Sequence[int] | None = None) -> list[Micro]:
        """``(row_ids, micro_batch)`` pairs of this rank's share of ``rows`` (None: the
        whole batch, for scoring) within ``algo.micro_token_budget``."""
        scoring = rows is None
        rows = range(batch.size) if rows is None else rows
        mine = self.sync.rows(batch, rows, scoring)
        # an explicit budget as configured; auto (0) as resolved once at the start, so the
        # micro-batches never depend on how much memory happens to be free mid-run
        budget = self.cfg.algo.micro_token_budget or self.models.token_budget
        # rows that share a prompt in one micro-batch: their prompt runs once there
        packs = micro_batches(batch, mine, budget, by_prompt=True)
        return self.sync.pad(packs, batch, scoring)

    def vision_inputs(self, mb: TrainingBatch) -> dict[str, Any]:
        """Pixel inputs of a micro-batch's pictures (empty for text rows): the model's own
        image processor on the same pictures generation saw, plus M-RoPE position ids for
        the Qwen2-VL family (``ragen.models.vlm.forward_inputs``)."""
        if not mb.images or not any(mb.images):
            return {}
        actor = self.models.actor
        dtype = next(actor.parameters()).dtype
        images = row_images(mb.images)
        return forward_inputs(
            actor, self.models.tokenizer, mb.input_ids, mb.attention_mask, images, dtype
        )

    @property
    def loss_norm_constant(self) -> int:
        """Dr.GRPO's fixed normalizer (``seq-mean-token-sum-norm``): ``algo.loss_norm_constant``,
        or the response budget of one sample, max_new_tokens x the turns a sample holds."""
        a, r = self.cfg.algo, self.cfg.rollout
        if a.loss_norm_constant is not None:
            return int(a.loss_norm_constant)
        return r.max_new_tokens * (r.max_turns if r.context_window is None else 1)

    def denominator(self, mask: torch.Tensor) -> float:
        """The minibatch-wide denominator of the loss over ``mask`` (rows x T): every
        micro-batch divides by it, so their losses add up to the minibatch loss in every
        ``loss_agg_mode`` (``ragen.algo.losses.agg_denominator``)."""
        a = self.cfg.algo
        return algo.agg_denominator(mask, a.loss_agg_mode, self.loss_norm_constant)


class ModelPhases(Protocol):
    """The model phases of a step, as the loop calls them: this trainer in one process,
    the rank group with ``trainer.train_ranks > 1`` (every method is called on the
    trainer process and returns there; the other ranks take part as the phase needs)."""

    def score_batch(self, batch: TrainingBatch, metrics: dict[str, float]) -> None:
        """Fill old/ref log-probs (and old entropy when asked) and, with a critic, the
        values; add ``actor/gen_logprob_*`` to ``metrics`` (ranks: each its share)."""

    def update(self, batch: TrainingBatch, step: int) -> dict[str, float]:
        """The PPO epochs over ``batch`` (advantages set); metrics of the whole batch."""

    def reasoning_stats(self, trajectories: list[Trajectory], step: int) -> dict[str, float]:
        """``reasoning/*`` metrics of the step's trajectories (one forward pass)."""

    def whole_state(self, load: bool = False) -> AbstractContextManager[tuple]:
        """``(actor, critic, optimizers)`` whole on this process, as a checkpoint holds
        them; with ``load=True`` whatever was loaded into them becomes the models' state
        when the block exits."""
