"""The model phases of a training step, and who runs them: the seam between the trainer
and data parallelism.

A step of :class:`~ragen.trainer.starpo.StarPOTrainer` touches the models at four
points. In one process the trainer runs them itself; with ``trainer.train_ranks > 1``
the rank group does (:class:`~ragen.distributed.data_parallel.DataParallelUpdater`),
running the trainer's own code on every rank through a view that splits the rows and
adds the collectives. ``StarPOTrainer.phases()`` returns whichever applies; the RL math
(advantages, filtering, the loss) never needs to know.

Every method is called on the trainer process (rank 0) and returns there; the other
ranks take part as the phase needs (their share of the rows, the collectives of a
sharded forward, a gather of the whole state).
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Any, Protocol


class ModelPhases(Protocol):
    def score_batch(self, batch: Any, metrics: dict[str, float]) -> None:
        """Fill ``batch.old_log_prob`` (``ref_log_prob`` with KL, ``old_entropy`` when
        asked) and, with a critic, ``batch.values`` / ``final_values``; add
        ``actor/gen_logprob_*`` to ``metrics``. On ranks: each scores its share of the
        rows, rank 0 receives the whole tensors."""

    def update(self, batch: Any, step: int) -> dict[str, float]:
        """The PPO epochs over ``batch`` (advantages set); metrics of the whole batch."""

    def reasoning_stats(self, trajectories: list, step: int) -> dict[str, float]:
        """``reasoning/*`` metrics of the step's trajectories (one forward pass)."""

    def whole_state(self, load: bool = False) -> AbstractContextManager[tuple]:
        """``(actor, critic, optimizers)`` whole on this process, as a checkpoint holds
        them; with ``load=True`` whatever was loaded into them becomes the models' state
        when the block exits."""
