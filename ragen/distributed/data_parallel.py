"""Data-parallel actor/critic updates on ``M`` torch.distributed ranks.

The trainer process is rank 0; ranks ``1 .. M-1`` are Ray actors (:class:`RankWorker`),
each with the actor, critic and their optimizers, built by the trainer's own factory
(``ragen.trainer.models.build_models``): full replicas
(``trainer.train_sharding=replicate``), or FSDP2 shards of them (``fsdp``,
:mod:`ragen.distributed.fsdp`). :class:`DataParallelUpdater` runs the model phases of a
step (``ragen.trainer.starpo.ModelPhases``) on every rank: each rank calls the trainer's
public phase functions (``ragen.trainer.scoring``, ``ragen.trainer.update``; the RL math
lives there and only there) with its own sync hook, :class:`RankGroupSync`
(``ragen.trainer.phase_context.RankSync``), which changes this:

* ``rows``: the rows are dealt to the ranks balanced by tokens
  (:func:`~ragen.distributed.sharding.split_rows`: a minibatch's rows in the update,
  the whole batch's when scoring); a rank packs only its own rows. The loss of every
  micro-batch still divides by the WHOLE minibatch's denominator (``agg_denominator``
  over ``batch.response_mask[rows]``, which every rank holds), so the ranks' losses are
  parts of the one-process loss in every ``loss_agg_mode``. Sharded ranks also pad
  their micro-batch count to the largest (``pad``: a padding micro-batch has empty
  masks: it runs the forward and backward collectives and adds nothing);
* :func:`score_batch`: each rank computes old/reference log-probs and values for its own
  rows; rank 0 receives the sums (the rows are disjoint, so the sum is the whole);
* ``grads``: before clipping, the gradients are SUMMED over ranks (not
  averaged: the parts already carry the global normalization): an all-reduce for
  replicas, FSDP's reduce-scatter with a divide factor of 1 for shards. Every rank then
  clips the same global gradient and takes the same optimizer step, so replicas stay
  equal without broadcasting weights;
* ``stats``: the minibatch statistics (loss parts, token-weighted metric parts) are summed over
  ranks, so the logged metrics are those of the whole minibatch, not of rank 0's share.

Replicas: rank 0 broadcasts its full state (weights and optimizer state) before a step
whenever its weights changed other than by the previous update (the first step, a
resume, a rollback), detected from the parameters' in-place version counters; learning
rates (scheduler, rollback changes) travel with every update. Checkpoints are written
from rank 0's replica. Shards: rank 0's whole state goes into every rank's shards at
the start; checkpoints gather it to rank 0 and write the same HF folders and
one-process optimizer state (so a run resumes onto any rank count), a rollback
scatters what it loaded.

gloo on CPU, NCCL on CUDA.

Over 500 lines because the collectives, the sync hook, the rank workers and rank 0's
updater must issue their collectives in one agreed order; kept in one file so that order
can be read in one place.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import os
import socket
from typing import Any

import torch
import torch.distributed as dist

from ragen.engines.hf import weights_fingerprint
from ragen.trainer import scoring, update
from ragen.trainer.models import TrainModels, build_models, make_optimizer, seed_everything
from ragen.trainer.phase_context import PhaseContext, RankSync

from . import fsdp
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
# the sync hook that makes the trainer's phases data-parallel
# --------------------------------------------------------------------------------------
_SAME_ON_EVERY_RANK = ("grad_norm", "skipped_steps")
_SCORES = ("old_log_prob", "ref_log_prob", "old_entropy", "values", "final_values")


class RankGroupSync(RankSync):
    """The model phases' sync hook (``ragen.trainer.phase_context.RankSync``) on rank
    ``rank`` of ``world``: rows dealt by tokens, gradients and minibatch statistics summed
    over ranks (module docstring). ``sharded``: the models are FSDP2 shards (their
    backward reduce-scatters the gradients itself, and is a collective every rank runs)."""

    def __init__(self, rank: int, world: int, device: torch.device, sharded: bool = False):
        self.rank, self.world, self.sharded = rank, world, bool(sharded)
        self.collective_backward = self.sharded
        self._device = device

    @property
    def device(self) -> torch.device:
        """Where the collectives' tensors live: NCCL reduces CUDA tensors only, gloo
        takes CPU ones."""
        return self._device if dist.get_backend() == "nccl" else torch.device("cpu")

    def rows(self, batch, rows, scoring: bool) -> list[int]:
        return split_rows(list(rows), batch.lengths.tolist(), self.world)[self.rank]

    def pad(self, micros, batch, scoring: bool):
        """Sharded forwards and backwards are collectives: every rank runs as many as the
        rank with the most micro-batches. Scoring repeats one of this rank's own
        micro-batches (the same numbers again) or, with no rows, row 0's (dropped by
        :func:`score_batch`); the update adds row 0 with empty masks (zero loss, zero
        gradient, zero weight in the metrics) under no row ids."""
        if not self.sharded:
            return micros
        count = torch.tensor([float(len(micros))], device=self.device)
        dist.all_reduce(count, op=dist.ReduceOp.MAX)
        missing = int(count.item()) - len(micros)
        if missing <= 0:
            return micros
        if scoring:
            filler = micros[0] if micros else ([0], batch.rows([0]))
        else:
            row = batch.rows([0])
            empty = {
                name: torch.zeros_like(getattr(row, name))
                for name in ("response_mask", "advantage_mask")
                if getattr(row, name) is not None
            }
            filler = ([], dataclasses.replace(row, **empty))
        return list(micros) + [filler] * missing

    def grads(self, params) -> None:
        if not self.sharded:  # shards were reduce-scattered (summed) by the backward
            allreduce_grads(params)

    def stats(self, stats: dict[str, float]) -> dict[str, float]:
        return allreduce_stats(stats, self.device, skip=_SAME_ON_EVERY_RANK)


def score_batch(ctx: PhaseContext, batch, metrics: dict[str, float]) -> None:
    """Old/reference log-probs and values of this rank's rows (``ctx.sync`` deals them);
    rank 0 receives every row's (and adds ``actor/gen_logprob_*``), the other ranks keep
    only their own."""
    sync = ctx.sync
    scoring.compute_old_log_probs(ctx, batch, {})
    if ctx.models.critic is not None:
        scoring.compute_values(ctx, batch)
    mine = torch.zeros(batch.size, device=batch.lengths.device)
    mine[sync.rows(batch, range(batch.size), True)] = 1.0
    for name in _SCORES:
        tensor = getattr(batch, name)
        if tensor is None:
            continue
        # a padding micro-batch may have recomputed another rank's row: only own rows
        part = (tensor * (mine[:, None] if tensor.dim() == 2 else mine)).to(sync.device)
        dist.reduce(part, dst=0)
        setattr(batch, name, part.to(tensor.device))
    if sync.rank == 0:
        metrics.update(scoring.logprob_agreement(batch))


def ppo_update(ctx: PhaseContext, batch, step: int) -> dict[str, float]:
    """This rank's part of the update (``ragen.trainer.update.ppo_update`` with the sync
    hook); the padding fraction of the ranks' micro-batches, averaged over ranks."""
    out = update.ppo_update(ctx, batch, step)
    if "perf/padding_fraction" in out:
        local = {"perf/padding_fraction": out["perf/padding_fraction"] / ctx.sync.world}
        out.update(allreduce_stats(local, ctx.sync.device))
    return out


def _optimizers(models: TrainModels) -> list[Any]:
    return list(models.optimizers().values())


def _models(models: TrainModels) -> list[torch.nn.Module]:
    return [m for m in (models.actor, models.critic) if m is not None]


def learning_rates(models: TrainModels) -> list[list[float]]:
    return [[g["lr"] for g in opt.param_groups] for opt in _optimizers(models)]


def set_learning_rates(models: TrainModels, lrs: list[list[float]]) -> None:
    for opt, group_lrs in zip(_optimizers(models), lrs):
        for group, lr in zip(opt.param_groups, group_lrs):
            group["lr"] = lr


def init_group(device: torch.device, init_method: str, rank: int, world: int) -> None:
    """Join the rank group (gloo on CPU, NCCL on CUDA)."""
    backend = backend_for(device)
    if backend == "nccl":
        torch.cuda.set_device(device)
    dist.init_process_group(
        backend, init_method=init_method, rank=rank, world_size=world, timeout=GROUP_TIMEOUT
    )


def shard(models: TrainModels, cfg: Any, world: int) -> dict:
    """FSDP2-shard ``models`` over the group (:func:`fsdp.shard_models`)."""
    from torch.distributed.device_mesh import init_device_mesh

    mesh = init_device_mesh(models.device.type, (world,))
    return fsdp.shard_models(models, mesh, cfg.model)


# --------------------------------------------------------------------------------------
# ranks 1 .. M-1
# --------------------------------------------------------------------------------------
class RankWorker:
    """Rank ``rank`` of the update group (run as a Ray actor): the models and optimizers
    the trainer's phases read, built by the trainer's own factory
    (``ragen.trainer.models.build_models``), then sharded or not. Each method is one
    phase's part on this rank; rank 0 calls it while running its own."""

    def __init__(self, cfg: Any, rank: int, world: int, threads: int = 1, sharded=False):
        torch.set_num_threads(max(1, int(threads)))
        seed_everything(cfg.trainer.seed)
        self.models = build_models(cfg)
        self._cfg = cfg  # the model settings sharding rebuilds the optimizers with
        self.rank, self.world, self.sharded = rank, world, bool(sharded)
        self.sync = RankGroupSync(rank, world, self.models.device, self.sharded)

    def ready(self) -> int:
        return os.getpid()

    def join(self, init_method: str) -> None:
        init_group(self.models.device, init_method, self.rank, self.world)
        if self.sharded:
            shard(self.models, self._cfg, self.world)

    def _context(self, cfg: Any) -> PhaseContext:
        return PhaseContext(cfg, self.models, self.sync)

    def score(self, batch, cfg: Any, resync: bool) -> None:
        m = self.models
        if resync:
            broadcast_state(_models(m), _optimizers(m))
        score_batch(self._context(cfg), batch.to(m.device), {})

    def update(self, batch, step: int, cfg: Any, lrs, resync: bool) -> dict[str, float]:
        m = self.models
        if resync:
            broadcast_state(_models(m), _optimizers(m))
        set_learning_rates(m, lrs)
        return ppo_update(self._context(cfg), batch.to(m.device), step)

    def reasoning_stats(self, trajectories, step: int, cfg: Any) -> dict[str, float]:
        return scoring.reasoning_stats(PhaseContext(cfg, self.models), trajectories, step)

    def gather(self) -> None:
        fsdp.gather_trainer(self.models)

    def scatter(self) -> None:
        fsdp.scatter_trainer(self.models, None)

    def gather_actor(self, names) -> None:
        fsdp.gather_model(self.models.actor, names)

    def memory(self, reset: bool = False) -> dict[str, int]:
        return rank_memory(self.models, reset)

    def leave(self) -> None:
        if dist.is_initialized():
            dist.destroy_process_group()


def rank_memory(models: TrainModels, reset: bool = False) -> dict[str, int]:
    """What a rank holds, in bytes: its weights, gradients and optimizer state (the
    tensors' exact sizes, shards only where sharded: :func:`fsdp.state_bytes`), and the
    process's peak resident memory (Linux ``VmHWM``; 0 where unknown). ``reset``: start
    a new peak from now (``/proc/self/clear_refs``), so that a later call reports the
    peak of what ran in between."""
    out = fsdp.state_bytes(models)
    try:
        if reset:
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")
        with open("/proc/self/status") as f:
            line = next(x for x in f if x.startswith("VmHWM:"))
        out["peak_rss"] = int(line.split()[1]) * 1024
    except (OSError, StopIteration):
        out["peak_rss"] = 0
    return out


# --------------------------------------------------------------------------------------
# rank 0: the trainer's side
# --------------------------------------------------------------------------------------
class DataParallelUpdater:
    """Starts ranks ``1 .. world-1`` as Ray actors, joins them as rank 0, and runs the
    trainer's model phases on all of them (``ragen.trainer.starpo.ModelPhases``: it
    stands in for the trainer in ``StarPOTrainer.phases()``), each rank calling the
    trainer's phase functions with its :class:`RankGroupSync`. ``trainer``: read for its
    ``cfg`` (at every phase: a rollback may replace it), ``models`` and ``device``.
    ``sharded``: FSDP2."""

    START_TIMEOUT_S = 300.0

    def __init__(
        self, ray: Any, trainer: Any, world: int, resources: dict[str, float], sharded=False
    ):
        self.ray, self.trainer, self.world = ray, trainer, int(world)
        self.sharded = bool(sharded)
        if dist.is_initialized():
            raise RuntimeError(
                "torch.distributed is already initialized in this process; "
                "trainer.train_ranks starts its own process group"
            )
        threads = max(1, int(resources["num_cpus"] or 1))
        actor_class = ray.remote(**resources)(RankWorker)
        self.ranks = [
            actor_class.remote(trainer.cfg, rank, self.world, threads, self.sharded)
            for rank in range(1, self.world)
        ]
        wait_ready(
            ray, [r.ready.remote() for r in self.ranks], "training ranks", resources,
            self.START_TIMEOUT_S,
        )  # fmt: skip
        host = ray.util.get_node_ip_address()
        init_method = f"tcp://{host}:{free_port()}"
        joined = [r.join.remote(init_method) for r in self.ranks]
        init_group(trainer.device, init_method, 0, self.world)
        self.sync = RankGroupSync(0, self.world, trainer.device, self.sharded)
        self.skeletons = shard(trainer.models, trainer.cfg, self.world) if self.sharded else {}
        ray.get(joined)
        self._fingerprint: Any = object()  # replicas: the first phase broadcasts rank 0's state
        self._broadcast = False  # whether this step's phases broadcast rank 0's state

    def _context(self) -> PhaseContext:
        return PhaseContext(self.trainer.cfg, self.trainer.models, self.sync)

    def _resync(self) -> bool:
        """Replicas: whether rank 0's weights changed since the ranks last matched them
        (then this phase broadcasts its state first)."""
        if self.sharded:
            return False
        fingerprint = tuple(weights_fingerprint(m) for m in _models(self.trainer.models))
        return fingerprint != self._fingerprint

    def _matched(self) -> None:
        self._fingerprint = tuple(weights_fingerprint(m) for m in _models(self.trainer.models))

    def _run(self, remote_calls: list, local):
        """Start the ranks' parts, run rank 0's, then wait (a rank's error surfaces)."""
        out = local()
        self.ray.get(remote_calls)
        return out

    # -- the phases --------------------------------------------------------------------
    def score_batch(self, batch, metrics: dict[str, float]) -> None:
        tr = self.trainer
        resync = self._resync()
        self._broadcast = resync
        ref = self.ray.put(batch.to("cpu"))
        pending = [r.score.remote(ref, tr.cfg, resync) for r in self.ranks]

        def local():
            if resync:
                broadcast_state(_models(tr.models), _optimizers(tr.models))
            score_batch(self._context(), batch, metrics)

        self._run(pending, local)
        self._matched()

    def update(self, batch, step: int) -> dict[str, float]:
        tr = self.trainer
        resync = self._resync()
        cpu_batch = self.ray.put(batch.to("cpu"))
        lrs = learning_rates(tr.models)
        pending = [r.update.remote(cpu_batch, step, tr.cfg, lrs, resync) for r in self.ranks]

        def local():
            if resync:
                broadcast_state(_models(tr.models), _optimizers(tr.models))
            return ppo_update(self._context(), batch, step)

        out = self._run(pending, local)
        self._matched()
        out["scale/update_ranks"] = float(self.world)
        out["scale/state_broadcast"] = float(resync or self._broadcast)
        self._broadcast = False
        return out

    def reasoning_stats(self, trajectories, step: int) -> dict[str, float]:
        tr = self.trainer
        ctx = PhaseContext(tr.cfg, tr.models)  # every rank runs the whole forward
        if not self.sharded:  # rank 0 holds the whole model
            return scoring.reasoning_stats(ctx, trajectories, step)
        ref = self.ray.put(trajectories)
        pending = [r.reasoning_stats.remote(ref, step, tr.cfg) for r in self.ranks]
        return self._run(pending, lambda: scoring.reasoning_stats(ctx, trajectories, step))

    @contextlib.contextmanager
    def whole_state(self, load: bool = False):
        """Replicas: rank 0's own. Shards: gathered into whole copies on rank 0 (a plain
        HF model and a one-process optimizer each), and with ``load=True`` sent back
        into the shards when the block exits without an error."""
        tr = self.trainer
        if not self.sharded:  # rank 0's replica; the next phase broadcasts a change
            yield tr.models.actor, tr.models.critic, tr.models.optimizers()
            return

        whole = self._run(
            [r.gather.remote() for r in self.ranks], lambda: fsdp.gather_trainer(tr.models)
        )
        m = tr.cfg.model
        twins, optimizers = {}, {}
        for role in ("actor", "critic"):
            if role not in whole:
                continue
            twin = fsdp.materialize(self.skeletons[role], whole[role], whole[f"{role}_buffers"])
            lr = m.actor_lr if role == "actor" else m.critic_lr
            opt = make_optimizer(twin, lr, m.weight_decay)
            fsdp.load_named_optimizer_state(twin, opt, whole[fsdp.OPTIMIZERS[role]])
            twins[role], optimizers[role] = twin, opt
        yield twins["actor"], twins.get("critic"), optimizers
        if load:
            for role, twin in twins.items():
                whole[role] = twin.state_dict()
                opt = optimizers[role]
                whole[fsdp.OPTIMIZERS[role]] = fsdp.named_optimizer_state(twin, opt, gather=False)
            self._run(
                [r.scatter.remote() for r in self.ranks],
                lambda: fsdp.scatter_trainer(tr.models, whole),
            )

    def actor_state(self, full: bool) -> dict[str, torch.Tensor]:
        """Shards: the actor's weights to push to rollout workers, gathered from the ranks
        (``full``: every tensor of its state dict; else the trainable ones)."""
        names = None if full else fsdp.trainable_names(self.trainer.models.actor)
        pending = [r.gather_actor.remote(names) for r in self.ranks]
        return self._run(pending, lambda: fsdp.gather_model(self.trainer.models.actor, names))

    def memory(self, reset: bool = False) -> list[dict[str, int]]:
        """Per rank (0 first): :func:`rank_memory`."""
        remote = [r.memory.remote(reset) for r in self.ranks]
        return [rank_memory(self.trainer.models, reset), *self.ray.get(remote)]

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
