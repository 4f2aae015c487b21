"""Data-parallel actor/critic updates on ``M`` torch.distributed ranks.

The trainer process is rank 0; ranks ``1 .. M-1`` are Ray actors (:class:`RankWorker`),
each with a full replica of the actor, critic and their optimizers. Per update, every
rank runs the trainer's own :meth:`StarPOTrainer.update` (the RL math lives there and
only there) through a :class:`DataParallelView` that changes three things:

* ``_micro_batches(batch, rows)``: each minibatch's rows are dealt to the ranks
  (:func:`~ragen.distributed.sharding.split_rows`); a rank packs only its own rows.
  The loss of every micro-batch still divides by the WHOLE minibatch's denominator
  (``agg_denominator`` over ``batch.response_mask[rows]``, which every rank holds), so
  the ranks' losses are parts of the one-process loss in every ``loss_agg_mode``;
* ``_optimizer_step``: before clipping, the gradients are SUMMED over ranks (not
  averaged: the parts already carry the global normalization). Every rank then clips
  the same global gradient and takes the same optimizer step, so the replicas stay
  equal without broadcasting weights;
* the minibatch statistics (loss parts, token-weighted metric parts) are summed over
  ranks, so the logged metrics are those of the whole minibatch, not of rank 0's share.

Rank 0 broadcasts its full state (weights and optimizer state) before an update
whenever its weights changed other than by the previous update (the first update, a
resume, a rollback), detected from the parameters' in-place version counters; learning
rates (scheduler, rollback changes) travel with every update. Checkpoints are written
by rank 0 from its own full replica: the same HF folders as one process.

gloo on CPU, NCCL on CUDA. Not here: FSDP2 sharding for models whose replica does not
fit one device (docs/SCALING.md), data-parallel old/reference log-probs and values
(rank 0 computes them on the whole batch).
"""

from __future__ import annotations

import datetime
import socket
from typing import Any

import torch
import torch.distributed as dist

from .ray_setup import wait_ready
from .sharding import split_rows

BUCKET_ELEMENTS = 1 << 23  # gradients are all-reduced in flat buckets of at most this many
GROUP_TIMEOUT = datetime.timedelta(minutes=10)


# --------------------------------------------------------------------------------------
# collectives
# --------------------------------------------------------------------------------------
def allreduce_grads(params: list[torch.nn.Parameter]) -> None:
    """Sum ``p.grad`` over ranks, in place. A parameter without a gradient on every rank
    keeps ``grad=None`` (the optimizer skips it, as in one process); one with a gradient
    on some rank gets the sum, counting zeros for the ranks that had none."""
    if not params:
        return
    device = params[0].device
    has = torch.tensor([float(p.grad is not None) for p in params], device=device)
    dist.all_reduce(has)
    live = [p for p, h in zip(params, has.tolist()) if h > 0]
    for p in live:
        if p.grad is None:
            p.grad = torch.zeros_like(p)
    by_dtype: dict[tuple, list[torch.nn.Parameter]] = {}
    for p in live:
        by_dtype.setdefault((p.grad.dtype, p.grad.device), []).append(p)
    for group in by_dtype.values():
        bucket: list[torch.nn.Parameter] = []
        size = 0
        for p in group:
            bucket.append(p)
            size += p.grad.numel()
            if size >= BUCKET_ELEMENTS:
                _reduce_bucket(bucket)
                bucket, size = [], 0
        if bucket:
            _reduce_bucket(bucket)


def _reduce_bucket(bucket: list[torch.nn.Parameter]) -> None:
    flat = torch.cat([p.grad.reshape(-1) for p in bucket])
    dist.all_reduce(flat)
    offset = 0
    for p in bucket:
        n = p.grad.numel()
        p.grad.copy_(flat[offset : offset + n].view_as(p.grad))
        offset += n


def allreduce_stats(stats: dict[str, float], device: torch.device, skip=()) -> dict[str, float]:
    """Sum ``stats`` over ranks (a key missing on a rank counts 0), except keys ending in
    one of ``skip`` (already identical on every rank)."""
    keys: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(keys, sorted(stats))
    summed = [k for k in sorted(set().union(*keys)) if not k.endswith(tuple(skip))]
    values = torch.tensor([float(stats.get(k, 0.0)) for k in summed], dtype=torch.float64)
    values = values.to(device)
    dist.all_reduce(values)
    return {**stats, **dict(zip(summed, values.cpu().tolist()))}


def broadcast_state(models: list[torch.nn.Module], optimizers: list[Any]) -> None:
    """Rank 0's weights, buffers and optimizer states onto every rank, in place."""
    for model in models:
        for tensor in model.state_dict().values():
            dist.broadcast(tensor, src=0)
    states = [opt.state_dict() if dist.get_rank() == 0 else None for opt in optimizers]
    dist.broadcast_object_list(states, src=0)
    if dist.get_rank() != 0:
        for opt, state in zip(optimizers, states):
            opt.load_state_dict(state)


def backend_for(device: torch.device) -> str:
    return "nccl" if device.type == "cuda" else "gloo"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("", 0))
        return int(s.getsockname()[1])


# --------------------------------------------------------------------------------------
# the view that makes StarPOTrainer.update data-parallel
# --------------------------------------------------------------------------------------
_SAME_ON_EVERY_RANK = ("grad_norm", "skipped_steps")


class DataParallelView:
    """A trainer (or a rank's replica) seen as one rank of ``world``: attributes come
    from the trainer; the three methods below make its :meth:`update` data-parallel
    (module docstring)."""

    def __init__(self, trainer: Any, rank: int, world: int):
        self.__dict__["_trainer"] = trainer
        self.__dict__["rank"] = rank
        self.__dict__["world"] = world

    def __getattr__(self, name: str) -> Any:
        return getattr(self._trainer, name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self._trainer, name, value)

    def update(self, batch, step: int) -> dict[str, float]:
        from ragen.trainer.starpo import StarPOTrainer

        out = StarPOTrainer.update(self, batch, step)
        # the padding of this rank's micro-batches: averaged over ranks
        if "perf/padding_fraction" in out:
            local = {"perf/padding_fraction": out["perf/padding_fraction"] / self.world}
            out.update(allreduce_stats(local, self._stats_device))
        return out

    def _micro_batches(self, batch, rows=None):
        from ragen.trainer.starpo import StarPOTrainer

        if rows is None:  # whole-batch passes (old log-probs, values): not split here
            return StarPOTrainer._micro_batches(self._trainer, batch, rows)
        mine = split_rows(list(rows), batch.lengths.tolist(), self.world)[self.rank]
        return StarPOTrainer._micro_batches(self._trainer, batch, mine)

    def _optimizer_step(self, model, optimizer, prefix: str) -> dict[str, float]:
        from ragen.trainer.starpo import StarPOTrainer

        allreduce_grads([p for p in model.parameters() if p.requires_grad])
        return StarPOTrainer._optimizer_step(self._trainer, model, optimizer, prefix)

    def _actor_minibatch(self, batch, rows, micros) -> dict[str, float]:
        from ragen.trainer.starpo import StarPOTrainer

        stats = StarPOTrainer._actor_minibatch(self, batch, rows, micros)
        return allreduce_stats(stats, self._stats_device, skip=_SAME_ON_EVERY_RANK)

    def _critic_minibatch(self, batch, rows, micros) -> dict[str, float]:
        from ragen.trainer.starpo import StarPOTrainer

        stats = StarPOTrainer._critic_minibatch(self, batch, rows, micros)
        return allreduce_stats(stats, self._stats_device, skip=_SAME_ON_EVERY_RANK)

    @property
    def _stats_device(self) -> torch.device:
        # NCCL reduces CUDA tensors only; gloo takes CPU ones
        return self._trainer.device if dist.get_backend() == "nccl" else torch.device("cpu")


def _optimizers(trainer: Any) -> list[Any]:
    return [o for o in (trainer.actor_opt, trainer.critic_opt) if o is not None]


def _models(trainer: Any) -> list[torch.nn.Module]:
    return [m for m in (trainer.actor, trainer.critic) if m is not None]


def learning_rates(trainer: Any) -> list[list[float]]:
    return [[g["lr"] for g in opt.param_groups] for opt in _optimizers(trainer)]


def set_learning_rates(trainer: Any, lrs: list[list[float]]) -> None:
    for opt, group_lrs in zip(_optimizers(trainer), lrs):
        for group, lr in zip(opt.param_groups, group_lrs):
            group["lr"] = lr


# --------------------------------------------------------------------------------------
# ranks 1 .. M-1
# --------------------------------------------------------------------------------------
class RankWorker:
    """Rank ``rank`` of the update group (run as a Ray actor): a replica of the trainer's
    models and optimizers, built by the trainer's own construction code."""

    def __init__(self, cfg: Any, rank: int, world: int, threads: int = 1):
        torch.set_num_threads(max(1, int(threads)))
        self.replica = build_replica(cfg)
        self.rank, self.world = rank, world

    def ready(self) -> int:
        import os

        return os.getpid()

    def join(self, init_method: str) -> None:
        backend = backend_for(self.replica.device)
        if backend == "nccl":
            torch.cuda.set_device(self.replica.device)
        dist.init_process_group(
            backend, init_method=init_method, rank=self.rank, world_size=self.world,
            timeout=GROUP_TIMEOUT,
        )  # fmt: skip

    def update(self, batch, step: int, cfg: Any, lrs, resync: bool) -> dict[str, float]:
        r = self.replica
        r.cfg = cfg
        if resync:
            broadcast_state(_models(r), _optimizers(r))
        set_learning_rates(r, lrs)
        return DataParallelView(r, self.rank, self.world).update(batch.to(r.device), step)

    def leave(self) -> None:
        if dist.is_initialized():
            dist.destroy_process_group()


def build_replica(cfg: Any) -> Any:
    """A :class:`StarPOTrainer` with only its models, optimizers and schedulers (what
    ``update`` reads), built by ``StarPOTrainer._build_models`` itself."""
    from contextlib import nullcontext

    from ragen.models.loading import pick_device, pick_dtype
    from ragen.trainer.starpo import StarPOTrainer, seed_everything

    seed_everything(cfg.trainer.seed)
    replica = StarPOTrainer.__new__(StarPOTrainer)
    replica.cfg = cfg
    replica.device = pick_device(cfg.model.device, key="model.device")
    replica.dtype = pick_dtype(replica.device, cfg.model.dtype, training=True)
    use_bf16 = cfg.trainer.bf16 and replica.device.type == "cuda" and torch.cuda.is_bf16_supported()
    replica.autocast = torch.autocast("cuda", dtype=torch.bfloat16) if use_bf16 else nullcontext()
    replica._build_models()
    from ragen.models.memory import resolve_token_budget

    replica.token_budget = resolve_token_budget(
        replica.actor, replica.device, cfg.algo.micro_token_budget, "algo.micro_token_budget", 8192
    )
    return replica


# --------------------------------------------------------------------------------------
# rank 0: the trainer's side
# --------------------------------------------------------------------------------------
class DataParallelUpdater:
    """Starts ranks ``1 .. world-1`` as Ray actors, joins them as rank 0, and runs the
    trainer's update on all of them: ``updater.update(batch, step)`` stands in for
    ``trainer.update(batch, step)``."""

    START_TIMEOUT_S = 300.0

    def __init__(self, ray: Any, trainer: Any, world: int, resources: dict[str, float]):
        self.ray, self.trainer, self.world = ray, trainer, int(world)
        if dist.is_initialized():
            raise RuntimeError(
                "torch.distributed is already initialized in this process; "
                "trainer.train_ranks starts its own process group"
            )
        threads = max(1, int(resources["num_cpus"] or 1))
        actor_class = ray.remote(**resources)(RankWorker)
        self.ranks = [
            actor_class.remote(trainer.cfg, rank, self.world, threads)
            for rank in range(1, self.world)
        ]
        wait_ready(
            ray, [r.ready.remote() for r in self.ranks], "training ranks", resources,
            self.START_TIMEOUT_S,
        )  # fmt: skip
        host = ray.util.get_node_ip_address()
        init_method = f"tcp://{host}:{free_port()}"
        joined = [r.join.remote(init_method) for r in self.ranks]
        backend = backend_for(trainer.device)
        dist.init_process_group(
            backend, init_method=init_method, rank=0, world_size=self.world,
            timeout=GROUP_TIMEOUT,
        )  # fmt: skip
        ray.get(joined)
        self._fingerprint: Any = object()  # the first update broadcasts rank 0's state

    def update(self, batch, step: int) -> dict[str, float]:
        from ragen.engines.hf import weights_fingerprint

        tr = self.trainer
        fingerprint = tuple(weights_fingerprint(m) for m in _models(tr))
        resync = fingerprint != self._fingerprint
        cpu_batch = self.ray.put(batch.to("cpu"))
        lrs = learning_rates(tr)
        pending = [r.update.remote(cpu_batch, step, tr.cfg, lrs, resync) for r in self.ranks]
        if resync:
            broadcast_state(_models(tr), _optimizers(tr))
        out = DataParallelView(tr, 0, self.world).update(batch, step)
        self.ray.get(pending)  # a rank's error surfaces here
        self._fingerprint = tuple(weights_fingerprint(m) for m in _models(tr))
        out["scale/update_ranks"] = float(self.world)
        out["scale/state_broadcast"] = float(resync)
        return out

    def close(self) -> None:
        try:
            self.ray.get([r.leave.remote() for r in self.ranks], timeout=60)
        except Exception:
            pass
        for r in self.ranks:
            try:
                self.ray.kill(r)
            except Exception:
                pass
        self.ranks = []
        if dist.is_initialized():
            dist.destroy_process_group()
