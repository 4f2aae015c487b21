"""Scale-out: rollout workers on Ray, data-parallel updates on torch.distributed.

* ``trainer.rollout_workers=N`` -- :mod:`.rollout_workers`: N Ray actors, each with a
  copy of the policy and a shard of the env groups; sampling is seeded per fixed unit
  of groups (``trainer.worker_batch_groups``), so any N >= 1 plays the same
  trajectories; a worker that dies is replaced and its groups run again.
* ``trainer.train_ranks=M`` -- :mod:`.data_parallel`: the trainer's own update on M
  ranks (rank 0 = the trainer process), gradients summed over ranks, metrics global.
* :mod:`.ray_setup` -- local Ray, or a cluster from ``trainer.ray_address`` /
  ``$RAY_ADDRESS``; :mod:`.sharding` -- who gets which groups and rows;
  :mod:`.scale_out` -- the hooks the trainer calls.

``docs/SCALING.md`` is the user's guide (multi-GPU node, Ray cluster, memory, what was
verified). Needs the ``scale`` extra: ``pip install 'ragen[scale]'``.
"""

from .scale_out import ScaleOut

__all__ = ["ScaleOut"]
