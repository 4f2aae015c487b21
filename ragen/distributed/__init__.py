"""Scale-out: rollout workers on Ray, data-parallel updates on torch.distributed.

* ``trainer.rollout_workers=N`` -- :mod:`.rollout_workers`: N Ray actors, each with a
  copy of the policy and a shard of the env groups; sampling is seeded per episode, so
  0, 1 or N workers play the same trajectories; a worker (or node) that dies is
  replaced and its groups run again.
* ``trainer.train_ranks=M`` -- :mod:`.data_parallel`: the model phases of a step
  (``ragen.trainer.phase_context.ModelPhases``: scoring, the update, reasoning stats, the whole state for
  checkpoints) on M ranks (rank 0 = the trainer process), each rank its share of the
  rows, gradients summed over ranks, metrics global; replicas, or FSDP2 shards
  (``trainer.train_sharding=fsdp``, :mod:`.fsdp`).
* :mod:`.ray_setup` -- local Ray, or a cluster from ``trainer.ray_address`` /
  ``$RAY_ADDRESS`` (token authentication, errors that name the cause);
  :mod:`.sharding` -- who gets which groups and rows; :mod:`.scale_out` -- what a
  trainer attaches.

``docs/SCALING.md`` is the user's guide (multi-GPU node, Ray cluster, memory, what was
verified). Needs the ``scale`` extra: ``pip install 'ragen[scale]'``.
"""

from .scale_out import ScaleOut

__all__ = ["ScaleOut"]
