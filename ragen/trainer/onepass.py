"""One forward per model where a step's phases compute the same thing twice.

A StarPO step scores its batch before it updates: the old log-probs (the actor before the
update), the critic's values (for the advantages), then the update runs the actor and the
critic again, with gradients. With ONE PPO epoch over ONE minibatch (``algo.ppo_epochs=1``
and ``algo.ppo_mini_batch_size`` at least the batch: the demo's setting, where StarPO-S
trains on what the filter keeps in one optimizer step), those are the same forwards:

* **actor.** Nothing changes the policy between the old-log-prob pass and the update's
  forward, so ``old_log_prob`` is the update's own ``log_prob`` (detached): the ratio is
  exactly 1, as the separate pass made it (``actor/ppo_kl`` was 0.0 there too). The
  separate pass is skipped; the update fills ``batch.old_log_prob`` as it goes, so the
  metrics that read it afterwards (``actor/gen_logprob_abs_diff``) are unchanged.
* **critic.** The values only feed the advantages, and the estimators named in
  :data:`ROW_LOCAL_ESTIMATORS` compute a row's advantages and returns from that row
  alone. So the critic's update runs FIRST, micro-batch by micro-batch: its forward
  (with gradients) gives the values, the estimator turns them into that micro-batch's
  advantages and returns, and the value loss (against those returns, clipped around
  those values, as before) is backpropagated at once. The optimizer step follows the
  last micro-batch; the actor's update then reads the advantages. The critic's update
  never depended on the actor's, so the order changes nothing.

Each saves one forward pass of its model per step (a quarter of what the model costs a
step: forward + forward + backward becomes forward + backward). Where the conditions do
not hold (several epochs or minibatches, a KL term, ``algo.pg_min_entropy``, training
ranks, an estimator that looks across rows) the step keeps its separate passes;
``trainer.fuse_passes=false`` keeps them always (``tests/test_onepass.py`` checks the
two paths give the same metrics and weights).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ragen.batching import TrainingBatch

    from .config import TrainConfig

#: advantage estimators whose output for a row depends on that row's inputs only (per-row
#: GAE recursions), so they can run micro-batch by micro-batch inside the critic's update
ROW_LOCAL_ESTIMATORS = frozenset({"gae", "masked_gae", "bi_level_gae", "turn_gae"})


def shares_actor_forward(cfg: TrainConfig, batch_size: int, data_parallel: bool) -> bool:
    """Whether the update's forward can give the old log-probs (see the module doc)."""
    a = cfg.algo
    return (
        cfg.trainer.fuse_passes
        and not data_parallel
        and a.ppo_epochs == 1
        and a.ppo_mini_batch_size >= batch_size
        and a.kl_coef == 0  # no reference pass, no KL in the rewards
        and a.pg_min_entropy == 0  # no old entropy needed before the advantages
    )


def shares_critic_forward(cfg: TrainConfig, batch_size: int, data_parallel: bool) -> bool:
    """Whether the critic's update forward can give the values (see the module doc)."""
    return (
        shares_actor_forward(cfg, batch_size, data_parallel)
        and cfg.algo.use_critic
        and cfg.algo.critic_epochs in (0, 1)  # one critic pass, whose forward is the values
        and cfg.algo.adv_estimator in ROW_LOCAL_ESTIMATORS
    )


class CriticTargets:
    """The per-micro-batch targets of the critic's one-pass update.

    Called with each micro-batch's forward output (detached) before its value loss: sets
    the micro-batch's ``values`` and ``returns`` (what the loss reads) and writes them,
    the bootstrap values and the raw advantages into the whole batch's tensors.
    ``estimate(mb)``: the trainer's estimator call on a micro-batch whose ``values`` and
    ``final_values`` are set, returning ``(advantages, returns)``.
    """

    def __init__(self, batch: TrainingBatch, estimate) -> None:
        import torch

        self.batch, self.estimate = batch, estimate
        shape = batch.response_mask.shape
        zeros = torch.zeros(shape, dtype=torch.float32, device=batch.response_mask.device)
        batch.values, batch.returns, batch.advantages = zeros, zeros.clone(), zeros.clone()
        batch.final_values = torch.zeros(batch.size, device=zeros.device)

    def __call__(self, ids: list[int], mb: TrainingBatch, vpreds, final) -> None:
        mb.values = vpreds * mb.advantage_mask  # as compute_values keeps them
        mb.final_values = final
        advantages, returns = self.estimate(mb)
        mb.returns = returns * mb.advantage_mask
        width = mb.input_ids.shape[1]
        b = self.batch
        b.values[ids, :width] = mb.values
        b.returns[ids, :width] = mb.returns
        b.advantages[ids, :width] = advantages
        b.final_values[ids] = final
