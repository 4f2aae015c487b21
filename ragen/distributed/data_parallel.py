"""Data-parallel actor/critic updates on ``M`` torch.distributed ranks.

The trainer process is rank 0; ranks ``1 .. M-1`` are Ray actors (:class:`RankWorker`),
each with the actor, critic and their optimizers, built by the trainer's own code:
full replicas (``trainer.train_sharding=replicate``), or FSDP2 shards of them
(``fsdp``, :mod:`ragen.distributed.fsdp`). :class:`DataParallelUpdater` runs the model
phases of a step (:class:`ragen.distributed.phases.ModelPhases`) on every rank through
a :class:`DataParallelView` of the trainer (the RL math lives in ``StarPOTrainer`` and
only there), which changes this:

* ``_micro_batches(batch, rows)``: the rows are dealt to the ranks balanced by tokens
  (:func:`~ragen.distributed.sharding.split_rows`: a minibatch's rows in the update,
  the whole batch's when scoring); a rank packs only its own rows. The loss of every
  micro-batch still divides by the WHOLE minibatch's denominator (``agg_denominator``
  over ``batch.response_mask[rows]``, which every rank holds), so the ranks' losses are
  parts of the one-process loss in every ``loss_agg_mode``. Sharded ranks also pad
  their micro-batch count to the largest (a padding micro-batch has empty masks: it
  runs the forward and backward collectives and adds nothing);
* ``score_batch``: each rank computes old/reference log-probs and values for its own
  rows; rank 0 receives the sums (the rows are disjoint, so the sum is the whole);
* ``_optimizer_step``: before clipping, the gradients are SUMMED over ranks (not
  averaged: the parts already carry the global normalization): an all-reduce for
  replicas, FSDP's reduce-scatter with a divide factor of 1 for shards. Every rank then
  clips the same global gradient and takes the same optimizer step, so replicas stay
  equal without broadcasting weights;
* the minibatch statistics (loss parts, token-weighted metric parts) are summed over
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
"""

from __future__ import annotations

import contextlib
import dataclasses
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
# the view that makes StarPOTrainer's phases data-parallel
# --------------------------------------------------------------------------------------
_SAME_ON_EVERY_RANK = ("grad_norm", "skipped_steps")
_SCORES = ("old_log_prob", "ref_log_prob", "old_entropy", "values", "final_values")


class DataParallelView:
    """A trainer (or a rank's replica) seen as one rank of ``world``: attributes come
    from the trainer; the methods below make its phases data-parallel (module
    docstring). ``sharded``: its models are FSDP2 shards."""

    def __init__(self, trainer: Any, rank: int, world: int, sharded: bool = False):
        self.__dict__["_trainer"] = trainer
        self.__dict__["rank"] = rank
        self.__dict__["world"] = world
        self.__dict__["sharded"] = sharded

    def __getattr__(self, name: str) -> Any:
        return getattr(self._trainer, name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self._trainer, name, value)

    # -- phases ------------------------------------------------------------------------
    def score_batch(self, batch, metrics: dict[str, float]) -> None:
        """Old/reference log-probs and values of this rank's rows; rank 0 receives every
        row's (and adds ``actor/gen_logprob_*``), the other ranks keep only their own."""
        from ragen.trainer.starpo import StarPOTrainer, logprob_agreement

        StarPOTrainer.compute_old_log_probs(self, batch, {})
        if self.critic is not None:
            StarPOTrainer.compute_values(self, batch)
        mine = torch.zeros(batch.size, device=batch.lengths.device)
        mine[self._score_rows(batch)] = 1.0
        device = self._stats_device
        for name in _SCORES:
            tensor = getattr(batch, name)
            if tensor is None:
                continue
            # a padding micro-batch may have recomputed another rank's row: only own rows
            part = (tensor * (mine[:, None] if tensor.dim() == 2 else mine)).to(device)
            dist.reduce(part, dst=0)
            setattr(batch, name, part.to(tensor.device))
        if self.rank == 0:
            metrics.update(logprob_agreement(batch))

    def update(self, batch, step: int) -> dict[str, float]:
        from ragen.trainer.starpo import StarPOTrainer

        out = StarPOTrainer.update(self, batch, step)
        # the padding of this rank's micro-batches: averaged over ranks
        if "perf/padding_fraction" in out:
            local = {"perf/padding_fraction": out["perf/padding_fraction"] / self.world}
            out.update(allreduce_stats(local, self._stats_device))
        return out

    # -- what the phases call ----------------------------------------------------------
    def _score_rows(self, batch) -> list[int]:
        return split_rows(list(range(batch.size)), batch.lengths.tolist(), self.world)[self.rank]

    def _micro_batches(self, batch, rows=None):
        from ragen.trainer.starpo import StarPOTrainer

        scoring = rows is None  # the whole batch (old log-probs, values)
        if scoring:
            mine = self._score_rows(batch)
        else:
            mine = split_rows(list(rows), batch.lengths.tolist(), self.world)[self.rank]
        micros = StarPOTrainer._micro_batches(self._trainer, batch, mine)
        if self.sharded:
            micros = self._pad(micros, batch, scoring)
        return micros

    def _pad(self, micros, batch, scoring: bool):
        """Sharded forwards and backwards are collectives: every rank runs as many as the
        rank with the most micro-batches. Scoring repeats one of this rank's own
        micro-batches (the same numbers again) or, with no rows, row 0's (dropped by
        ``score_batch``); the update adds row 0 with empty masks (zero loss, zero
        gradient, zero weight in the metrics) under no row ids."""
        count = torch.tensor([float(len(micros))], device=self._stats_device)
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

    def _optimizer_step(self, model, optimizer, prefix: str) -> dict[str, float]:
        from ragen.trainer.starpo import StarPOTrainer

        if not self.sharded:  # shards were reduce-scattered (summed) by the backward
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


def init_group(device: torch.device, init_method: str, rank: int, world: int) -> None:
    """Join the rank group (gloo on CPU, NCCL on CUDA)."""
    backend = backend_for(device)
    if backend == "nccl":
        torch.cuda.set_device(device)
    dist.init_process_group(
        backend, init_method=init_method, rank=rank, world_size=world, timeout=GROUP_TIMEOUT
    )


def shard(trainer: Any, world: int) -> dict:
    """FSDP2-shard ``trainer``'s models over the group (:func:`fsdp.shard_trainer`)."""
    from torch.distributed.device_mesh import init_device_mesh

    from . import fsdp

    mesh = init_device_mesh(trainer.device.type, (world,))
    trainer._collective_backward = True
    return fsdp.shard_trainer(trainer, mesh)


# --------------------------------------------------------------------------------------
# ranks 1 .. M-1
# --------------------------------------------------------------------------------------
class RankWorker:
    """Rank ``rank`` of the update group (run as a Ray actor): the trainer's models and
    optimizers, built by the trainer's own construction code, then sharded or not. Each
    method is one phase's part on this rank; rank 0 calls it while running its own."""

    def __init__(self, cfg: Any, rank: int, world: int, threads: int = 1, sharded=False):
        torch.set_num_threads(max(1, int(threads)))
        self.replica = build_replica(cfg)
        self.rank, self.world, self.sharded = rank, world, bool(sharded)

    def ready(self) -> int:
        import os

        return os.getpid()

    def join(self, init_method: str) -> None:
        init_group(self.replica.device, init_method, self.rank, self.world)
        if self.sharded:
            shard(self.replica, self.world)

    def _view(self, cfg: Any) -> DataParallelView:
        self.replica.cfg = cfg
        return DataParallelView(self.replica, self.rank, self.world, self.sharded)

    def score(self, batch, cfg: Any, resync: bool) -> None:
        r = self.replica
        if resync:
            broadcast_state(_models(r), _optimizers(r))
        self._view(cfg).score_batch(batch.to(r.device), {})

    def update(self, batch, step: int, cfg: Any, lrs, resync: bool) -> dict[str, float]:
        r = self.replica
        view = self._view(cfg)
        if resync:
            broadcast_state(_models(r), _optimizers(r))
        set_learning_rates(r, lrs)
        return view.update(batch.to(r.device), step)

    def reasoning_stats(self, trajectories, step: int, cfg: Any) -> dict[str, float]:
        self.replica.cfg = cfg
        return self.replica.reasoning_stats(trajectories, step)

    def gather(self) -> None:
        from . import fsdp

        fsdp.gather_trainer(self.replica)

    def scatter(self) -> None:
        from . import fsdp

        fsdp.scatter_trainer(self.replica, None)

    def gather_actor(self, names) -> None:
        from . import fsdp

        fsdp.gather_model(self.replica.actor, names)

    def memory(self, reset: bool = False) -> dict[str, int]:
        return rank_memory(self.replica, reset)

    def leave(self) -> None:
        if dist.is_initialized():
            dist.destroy_process_group()


def rank_memory(trainer: Any, reset: bool = False) -> dict[str, int]:
    """What a rank holds, in bytes: its weights, gradients and optimizer state (the
    tensors' exact sizes, shards only where sharded: :func:`fsdp.state_bytes`), and the
    process's peak resident memory (Linux ``VmHWM``; 0 where unknown). ``reset``: start
    a new peak from now (``/proc/self/clear_refs``), so that a later call reports the
    peak of what ran in between."""
    from . import fsdp

    out = fsdp.state_bytes(trainer)
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


def build_replica(cfg: Any) -> Any:
    """A :class:`StarPOTrainer` with only its models, optimizers and schedulers (what
    the phases read), built by ``StarPOTrainer._build_models`` itself."""
    from contextlib import nullcontext

    from ragen.models.loading import pick_device, pick_dtype
    from ragen.trainer.starpo import StarPOTrainer, seed_everything

    seed_everything(cfg.trainer.seed)
    replica = StarPOTrainer.__new__(StarPOTrainer)
    replica.cfg = cfg
    replica.scale = None
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
    trainer's model phases on all of them (:class:`~ragen.distributed.phases.ModelPhases`:
    it stands in for the trainer in ``StarPOTrainer.phases()``). ``sharded``: FSDP2."""

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
        self.skeletons = shard(trainer, self.world) if self.sharded else {}
        ray.get(joined)
        self._fingerprint: Any = object()  # replicas: the first phase broadcasts rank 0's state
        self._broadcast = False  # whether this step's phases broadcast rank 0's state

    def _view(self) -> DataParallelView:
        return DataParallelView(self.trainer, 0, self.world, self.sharded)

    def _resync(self) -> bool:
        """Replicas: whether rank 0's weights changed since the ranks last matched them
        (then this phase broadcasts its state first)."""
        from ragen.engines.hf import weights_fingerprint

        if self.sharded:
            return False
        fingerprint = tuple(weights_fingerprint(m) for m in _models(self.trainer))
        return fingerprint != self._fingerprint

    def _matched(self) -> None:
        from ragen.engines.hf import weights_fingerprint

        self._fingerprint = tuple(weights_fingerprint(m) for m in _models(self.trainer))

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
                broadcast_state(_models(tr), _optimizers(tr))
            self._view().score_batch(batch, metrics)

        self._run(pending, local)
        self._matched()

    def update(self, batch, step: int) -> dict[str, float]:
        tr = self.trainer
        resync = self._resync()
        cpu_batch = self.ray.put(batch.to("cpu"))
        lrs = learning_rates(tr)
        pending = [r.update.remote(cpu_batch, step, tr.cfg, lrs, resync) for r in self.ranks]

        def local():
            if resync:
                broadcast_state(_models(tr), _optimizers(tr))
            return self._view().update(batch, step)

        out = self._run(pending, local)
        self._matched()
        out["scale/update_ranks"] = float(self.world)
        out["scale/state_broadcast"] = float(resync or self._broadcast)
        self._broadcast = False
        return out

    def reasoning_stats(self, trajectories, step: int) -> dict[str, float]:
        tr = self.trainer
        if not self.sharded:  # rank 0 holds the whole model
            return tr.reasoning_stats(trajectories, step)
        ref = self.ray.put(trajectories)
        pending = [r.reasoning_stats.remote(ref, step, tr.cfg) for r in self.ranks]
        return self._run(pending, lambda: tr.reasoning_stats(trajectories, step))

    @contextlib.contextmanager
    def whole_state(self, load: bool = False):
        """Replicas: rank 0's own. Shards: gathered into whole copies on rank 0 (a plain
        HF model and a one-process optimizer each), and with ``load=True`` sent back
        into the shards when the block exits without an error."""
        tr = self.trainer
        if not self.sharded:
            with tr.whole_state(load) as parts:
                yield parts
            return
        from ragen.trainer import setup

        from . import fsdp

        whole = self._run([r.gather.remote() for r in self.ranks], lambda: fsdp.gather_trainer(tr))
        m = tr.cfg.model
        twins, optimizers = {}, {}
        for role in ("actor", "critic"):
            if role not in whole:
                continue
            twin = fsdp.materialize(self.skeletons[role], whole[role], whole[f"{role}_buffers"])
            lr = m.actor_lr if role == "actor" else m.critic_lr
            opt = setup.make_optimizer(twin, lr, m.weight_decay)
            fsdp.load_named_optimizer_state(twin, opt, whole[fsdp.OPTIMIZERS[role]])
            twins[role], optimizers[role] = twin, opt
        yield twins["actor"], twins.get("critic"), optimizers
        if load:
            for role, twin in twins.items():
                whole[role] = twin.state_dict()
                opt = optimizers[role]
                whole[fsdp.OPTIMIZERS[role]] = fsdp.named_optimizer_state(twin, opt, gather=False)
            self._run(
                [r.scatter.remote() for r in self.ranks], lambda: fsdp.scatter_trainer(tr, whole)
            )

    def actor_state(self, full: bool) -> dict[str, torch.Tensor]:
        """Shards: the actor's weights to push to rollout workers, gathered from the ranks
        (``full``: every tensor of its state dict; else the trainable ones)."""
        from . import fsdp

        names = None if full else fsdp.trainable_names(self.trainer.actor)
        pending = [r.gather_actor.remote(names) for r in self.ranks]
        return self._run(pending, lambda: fsdp.gather_model(self.trainer.actor, names))

    def memory(self, reset: bool = False) -> list[dict[str, int]]:
        """Per rank (0 first): :func:`rank_memory`."""
        remote = [r.memory.remote(reset) for r in self.ranks]
        return [rank_memory(self.trainer, reset), *self.ray.get(remote)]

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
