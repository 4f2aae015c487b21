"""Rollout workers: Ray actors that each own a copy of the policy and a shard of the groups.

Sampling is seeded per EPISODE, never by the worker or the batch: every episode's turn
draws from its own stream (``derive_seed("sample", s, group, member, turn)``, ``s`` the
step's sample seed; ``ragen.agent.rollout`` and ``ragen.engines.draws``), and member
dynamics seeds come from the run seed, the group's initial-state seed and the member
index. So the trajectories of a step are the same in one process
(``trainer.rollout_workers=0``), on 1 worker or on N: each worker plays its contiguous
shard of the groups (:func:`~ragen.distributed.sharding.shard_groups`) as ONE batch
(one generate call per turn for all its episodes), any worker count works with any
number of groups (workers beyond the groups idle that rollout), and a worker that dies
is replaced and its groups re-run to the same result (``tests/test_distributed_rollout.py``
compares ids, masks, rewards and end reasons exactly, log-probs to 1e-5). What a batch
changes is float rounding only: a draw within ~1e-7 of a CDF boundary can flip.

``trainer.worker_batch_groups`` (0: no cap) caps the groups in one generate batch on a
worker, to bound its KV-cache memory; it does not change the samples.

Weights: the trainer pushes the actor's state to every worker before a rollout whenever
it changed (after an update, a resume or a rollback): the full state the first time,
then the trainable tensors only (all of them in full fine-tuning, the adapters with LoRA).
With sharded training (``trainer.train_sharding=fsdp``) the state is gathered from the
ranks' shards first (``state_source``).
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

from ragen.agent.env_manager import EnvStateManager
from ragen.agent.policies import ModelPolicy
from ragen.agent.rollout import RolloutConfig, RolloutResult, run_rollout
from ragen.engines.hf import weights_fingerprint
from ragen.engines.hf_vlm import engine_for
from ragen.errors import ConfigError
from ragen.models import load_policy
from ragen.models.lora import apply_lora

from .ray_setup import wait_ready
from .sharding import shard_groups

# run_rollout's stats that add up over groups and workers
_SUMMED = (
    "generated_tokens",
    "generation_seconds",
    "generate_calls",
    "episodes",
    "samples",
    "context_overflow_episodes",
    "context_fallbacks",
    "context_inexact",
)


@dataclasses.dataclass(frozen=True)
class EnvSpec:
    """What a worker needs to build an :class:`EnvStateManager` like the trainer's."""

    name: str
    config: dict[str, Any]
    group_size: int
    seed: int  # the run seed (member dynamics seeds derive from it)

    @classmethod
    def of(cls, manager: Any) -> EnvSpec:
        return cls(manager.env_name, dict(manager.env_config), manager.group_size, manager.seed)

    def key(self) -> str:
        return json.dumps([self.name, self.config, self.group_size, self.seed], sort_keys=True)


def shard_manager(spec: EnvSpec, n_groups: int):
    """An :class:`EnvStateManager` of ``n_groups`` groups with the run's group size and seed."""
    return EnvStateManager(
        spec.name, spec.config, env_groups=n_groups, group_size=spec.group_size, seed=spec.seed
    )


def batches_of(groups: list[int], batch_groups: int) -> list[list[int]]:
    """``groups`` in consecutive batches of at most ``batch_groups`` (0: one batch)."""
    if batch_groups < 0:
        raise ConfigError(f"batch_groups must be >= 0, got {batch_groups}")
    if not groups:
        return []
    size = batch_groups or len(groups)
    return [groups[i : i + size] for i in range(0, len(groups), size)]


def rollout_groups(
    policy: Any,
    manager_for: Callable[[int], Any],
    config: RolloutConfig,
    groups: list[int],
    seeds: list[int],
    batch_groups: int = 0,
) -> RolloutResult:
    """Play ``groups`` (global group indices; ``seeds[g]``: group g's initial-state seed)
    on ``manager_for(n)`` managers, in batches of ``batch_groups`` (0: all at once);
    ``config.seed`` is the step's sample seed.

    Trajectories carry the global ``group_id`` and ``episode_id = g * group_size + m``,
    as one process numbers them, and sample what one process samples (module doc).
    """
    trajectories, stats = [], defaultdict(float)
    for batch in batches_of([int(g) for g in groups], batch_groups):
        manager = manager_for(len(batch))
        size = manager.group_size
        result = run_rollout(policy, manager, config, [int(seeds[g]) for g in batch], batch)
        for tr in result.trajectories:
            g = batch[tr.group_id]
            tr.episode_id = g * size + tr.episode_id % size
            tr.group_id = g
            trajectories.append(tr)
        for key in _SUMMED:
            stats[key] += float(result.stats.get(key, 0.0))
    return RolloutResult(trajectories, dict(stats))


class RolloutWorker:
    """One rollout worker (run as a Ray actor by :class:`RolloutWorkerPool`): a copy of
    the policy built from the run's model path, and env managers by spec."""

    def __init__(
        self,
        model_path: str,
        lora: Any,
        device: str,
        dtype: Any,
        threads: int = 1,
        engine: str = "static",
    ):
        import torch

        torch.set_num_threads(max(1, int(threads)))
        model, tokenizer = load_policy(model_path, device=device, dtype=dtype)
        if lora is not None and lora.rank > 0:
            model = apply_lora(model, lora)
        self.model = model.eval().requires_grad_(False)
        self.engine = engine_for(self.model, tokenizer, engine)  # the trainer's model.engine
        self.policy = ModelPolicy(self.engine, tokenizer)
        self._managers: dict[str, Any] = {}

    def pid(self) -> int:
        return os.getpid()

    def where(self) -> tuple[int, str]:
        """This worker's process id and Ray node id."""
        import ray

        return os.getpid(), ray.get_runtime_context().get_node_id()

    def load_weights(self, state: dict[str, Any]) -> float:
        """Copy ``state`` (name -> tensor, a subset of the model's state dict) in; return
        the seconds it took."""
        tic = time.perf_counter()
        missing = set(state) - set(self.model.state_dict())
        if missing:
            raise RuntimeError(f"weights for unknown tensors: {sorted(missing)[:5]}")
        self.model.load_state_dict(state, strict=False)
        self.engine.clear_prefix_cache()
        return time.perf_counter() - tic

    def rollout(
        self,
        spec: EnvSpec,
        config: RolloutConfig,
        groups: list[int],
        seeds: list[int],
        batch_groups: int = 0,
    ) -> RolloutResult:
        def manager_for(n_groups: int):
            key = f"{spec.key()}/{n_groups}"
            if key not in self._managers:
                self._managers[key] = shard_manager(spec, n_groups)
            return self._managers[key]

        tic = time.perf_counter()
        result = rollout_groups(self.policy, manager_for, config, groups, seeds, batch_groups)
        result.stats["worker_seconds"] = time.perf_counter() - tic
        return result


def state_to_push(model: Any, full: bool) -> dict[str, Any]:
    """The tensors a worker needs: the whole state dict, or only the trainable ones."""
    state = model.state_dict()
    if not full:
        trainable = {n for n, p in model.named_parameters() if p.requires_grad}
        state = {k: v for k, v in state.items() if k in trainable}
    return {k: v.detach().to("cpu", copy=True) for k, v in state.items()}


class RolloutWorkerPool:
    """``N`` :class:`RolloutWorker` actors and the trainer-side logic around them.

    ``collect(actor, manager, config, seeds)`` is the trainer's rollout: push weights if
    the actor changed, deal the groups (:func:`shard_groups`: contiguous, near-equal
    shards; workers beyond the groups idle), gather, and replace any worker that died
    (its groups run again on the new one). Workers are spread over a cluster's nodes
    (Ray's ``SPREAD`` strategy). ``events`` lists what happened (restarts) for the
    trainer to log; ``on_dispatch(worker, pid)``, when set, is called after each shard is
    sent (the fault tests kill a worker, or its node, there). ``state_source(full)``, when
    set, gives the actor's weights to push instead of ``actor.state_dict()`` (sharded
    training gathers them from the ranks).
    """

    MAX_RESTARTS_PER_ROLLOUT = 3
    START_TIMEOUT_S = 300.0

    def __init__(
        self,
        ray: Any,
        n_workers: int,
        model_path: str,
        lora: Any,
        device: str,
        dtype: Any,
        resources: dict[str, float],
        batch_groups: int = 0,
        engine: str = "static",
    ):
        self.ray = ray
        self.batch_groups = int(batch_groups)
        threads = max(1, int(resources["num_cpus"] or 1))
        self._args = (model_path, lora, device, dtype, threads, engine)
        self.resources = resources
        self._actor_class = ray.remote(**resources, scheduling_strategy="SPREAD")(RolloutWorker)
        self.workers = [self._actor_class.remote(*self._args) for _ in range(n_workers)]
        places = wait_ready(
            ray,
            [w.where.remote() for w in self.workers],
            "rollout workers",
            resources,
            self.START_TIMEOUT_S,
        )
        self.pids = [p for p, _ in places]
        self.nodes = [n for _, n in places]  # the Ray node id each worker runs on
        self._fingerprint: Any = object()  # never equal: the first collect pushes
        self._pushed_full = [False] * n_workers
        self.events: list[dict[str, Any]] = []
        self.on_dispatch: Callable[[int, int], None] | None = None
        self.state_source: Callable[[bool], dict[str, Any]] | None = None
        self.restarts = 0

    @property
    def size(self) -> int:
        return len(self.workers)

    # -- weights ---------------------------------------------------------------------
    def _state(self, actor: Any, full: bool) -> dict[str, Any]:
        if self.state_source is not None:
            return self.state_source(full)
        return state_to_push(actor, full=full)

    def sync(self, actor: Any) -> float:
        """Push ``actor``'s weights to every worker if they changed since the last push;
        return the seconds spent (0 when nothing changed)."""
        fingerprint = weights_fingerprint(actor)
        if fingerprint is not None and fingerprint == self._fingerprint:
            return 0.0
        tic = time.perf_counter()
        refs = {}
        for full in sorted(set(not done for done in self._pushed_full)):
            refs[full] = self.ray.put(self._state(actor, full))
        self.ray.get(
            [
                w.load_weights.remote(refs[not done])
                for w, done in zip(self.workers, self._pushed_full)
            ]
        )
        self._pushed_full = [True] * self.size
        self._fingerprint = fingerprint
        self._actor = actor
        return time.perf_counter() - tic

    # -- rollouts --------------------------------------------------------------------
    def collect(
        self, actor: Any, manager: Any, config: RolloutConfig, seeds: list[int]
    ) -> RolloutResult:
        """One rollout of every group of ``manager`` (its spec, not its envs) from
        ``seeds``, over the workers; trajectories in group order, as one process."""
        ray = self.ray
        from ray.exceptions import RayActorError, RayTaskError

        sync_s = self.sync(actor)
        tic = time.perf_counter()
        spec = EnvSpec.of(manager)
        shards = shard_groups(len(seeds), self.size)
        pending: dict[Any, int] = {}
        for w, shard in enumerate(shards):
            if shard:
                pending[self._submit(w, spec, config, shard, seeds)] = w
                if self.on_dispatch is not None:
                    self.on_dispatch(w, self.pids[w])
        results: dict[int, RolloutResult] = {}
        restarts = 0
        while pending:
            done, _ = ray.wait(list(pending), num_returns=1)
            ref = done[0]
            w = pending.pop(ref)
            try:
                results[w] = ray.get(ref)
            except RayTaskError as err:
                raise err.as_instanceof_cause() from None  # the worker's own error, as is
            except RayActorError as err:
                restarts += 1
                if restarts > self.MAX_RESTARTS_PER_ROLLOUT:
                    raise RuntimeError(
                        f"rollout workers died {restarts} times in one rollout; last: {err}"
                    ) from err
                self._replace(w, reason=str(err).splitlines()[0][:200], groups=shards[w])
                pending[self._submit(w, spec, config, shards[w], seeds)] = w
        merged = _merge([results[w] for w in sorted(results)], time.perf_counter() - tic)
        merged.stats["scale/weight_sync_s"] = sync_s
        merged.stats["scale/worker_restarts"] = float(restarts)
        busy = [w for w, shard in enumerate(shards) if shard]
        merged.stats["scale/busy_workers"] = float(len(busy))
        merged.stats["scale/worker_nodes"] = float(len({self.nodes[w] for w in busy}))
        return merged

    def _submit(self, w: int, spec: EnvSpec, config: RolloutConfig, groups, seeds):
        return self.workers[w].rollout.remote(
            spec, config, list(groups), [int(x) for x in seeds], self.batch_groups
        )

    def _replace(self, w: int, reason: str, groups: list[int]) -> None:
        """Start a new worker in slot ``w`` with the current weights."""
        dead_pid = self.pids[w]
        try:
            self.ray.kill(self.workers[w])
        except Exception:  # already gone
            pass
        dead_node = self.nodes[w]
        self.workers[w] = self._actor_class.remote(*self._args)
        ((self.pids[w], self.nodes[w]),) = wait_ready(
            self.ray, [self.workers[w].where.remote()], "rollout worker", self.resources,
            self.START_TIMEOUT_S,
        )  # fmt: skip
        state = self._state(self._actor, True)
        self.ray.get(self.workers[w].load_weights.remote(state))
        self._pushed_full[w] = True
        self.restarts += 1
        self.events.append(
            {
                "event": "rollout_worker_restart",
                "worker": w,
                "dead_pid": dead_pid,
                "new_pid": self.pids[w],
                "dead_node": dead_node,
                "new_node": self.nodes[w],
                "groups": list(groups),
                "reason": reason,
            }
        )

    def close(self) -> None:
        for w in self.workers:
            try:
                self.ray.kill(w)
            except Exception:
                pass
        self.workers = []


def _merge(results: list[RolloutResult], wall: float) -> RolloutResult:
    """Trajectories in group order and summed stats; ``tokens_per_s`` over the slowest
    worker's generation time, ``rollout_tokens_per_s`` over the wall clock of the rollout."""
    trajectories = sorted(
        (t for r in results for t in r.trajectories), key=lambda t: (t.group_id, t.episode_id)
    )
    stats: dict[str, float] = defaultdict(float)
    for r in results:
        for key in _SUMMED:
            stats[key] += float(r.stats.get(key, 0.0))
    slowest = max((r.stats.get("generation_seconds", 0.0) for r in results), default=0.0)
    stats["tokens_per_s"] = stats["generated_tokens"] / max(slowest, 1e-9)
    stats["rollout_seconds"] = wall
    stats["rollout_tokens_per_s"] = stats["generated_tokens"] / max(wall, 1e-9)
    return RolloutResult(trajectories, dict(stats))
