"""FSDP2 sharding of the trainer's models over the rank group (``trainer.train_sharding=fsdp``).

``torch.distributed.fsdp.fully_shard`` turns every parameter into a ``DTensor`` sharded
on dim 0 over the ranks. Here each decoder layer (the classes a model lists in
``_no_split_modules``, the unit transformers' own FSDP wrapping uses) is one FSDP unit
and the rest (embeddings, final norm, LM head, value head) the root's: a forward
all-gathers one unit's weights at a time and frees them after, the backward
reduce-scatters each unit's gradient into the rank's shard, and AdamW keeps its moments
for the shard only. Weights, gradients and optimizer state per rank are then about
1/ranks of a replica's (plus one unit's gathered weights in flight).

Gradients are SUMMED over ranks (FSDP's default averages): every rank's loss already
divides by the whole minibatch's denominator (``ragen.distributed.data_parallel``), so
the sum is the one-process gradient. :func:`sum_gradients` sets that on every unit (a
divide factor of 1 with sum-only reductions, which gloo and NCCL both run).

A rank's collectives must pair with every other rank's, so all ranks run the same
sequence of sharded forwards and backwards (``data_parallel`` pads the micro-batch
counts), through the root's own methods only (:func:`ragen.models.logprobs.runs_whole`):
its forward, or the split LM head of ``ragen.models.logprobs`` / the critic's split
values registered as second forward methods (:func:`add_split_method`,
:func:`add_values_method`: the log-probs of the wanted tokens without whole-vocabulary
logits, and, when scoring, a prompt prefix all rows share run once, as in one process;
the ranks agree on the prefix length, :func:`agreed_prefix`).

Checkpoints stay what one process writes (plain HF folders, one-process optimizer
state), so a run resumes onto any rank count: :func:`gather_state` collects the whole
state on rank 0 (one tensor at a time, to CPU), :func:`materialize` puts it into a
copy of the model made on the meta device before sharding (no memory until then),
and :func:`scatter_state` sends rank 0's whole state into every rank's shards (at
start, and after a rollback loads a checkpoint).
"""

from __future__ import annotations

import copy
import itertools
import types
import warnings
from collections.abc import Iterable
from typing import Any

import torch
import torch.distributed as dist

from ragen.models.logprobs import (
    SHARDED_SPLIT,
    position_ids_from_mask,
    shared_prefix_columns,
    split_head,
    split_logprobs,
)
from ragen.models.value import SHARDED_VALUES, split_values
from ragen.trainer.models import make_optimizer, make_scheduler

# --------------------------------------------------------------------------------------
# sharding
# --------------------------------------------------------------------------------------


def is_sharded(model: torch.nn.Module | None) -> bool:
    from torch.distributed.fsdp import FSDPModule

    return isinstance(model, FSDPModule)


def layer_units(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The decoder layers of ``model`` (through a PEFT wrapper): the modules whose class
    is in ``_no_split_modules``; without that list, the members of the longest
    ``ModuleList`` (the layer stack)."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    names = set(getattr(base, "_no_split_modules", None) or ())
    units = [m for m in model.modules() if type(m).__name__ in names]
    if units:
        return units
    lists = [m for m in model.modules() if isinstance(m, torch.nn.ModuleList)]
    return list(max(lists, key=len)) if lists else []


def shard_model(model: torch.nn.Module, mesh: Any) -> None:
    """``fully_shard`` each decoder layer, then the root, in place; gradients summed."""
    from torch.distributed.fsdp import fully_shard

    # transformers' outputs hold views (the critic's logits); FSDP warns that an in-place
    # op on one would skip its backward hook. The trainer only reads them (slices,
    # .float()), so the warning would be noise in every step's log.
    warnings.filterwarnings("ignore", message=r"FSDP2-wrapped module .* returned a view tensor")

    split = split_head(model)  # found before sharding changes the model's class
    for unit in layer_units(model):
        fully_shard(unit, mesh=mesh)
    fully_shard(model, mesh=mesh)
    sum_gradients(model)
    if split is not None:
        add_split_method(model, *split)
    else:
        add_values_method(model)


def agreed_prefix(shared: int) -> int:
    """The shared-prefix length every rank runs: the smallest any rank found (0 when one
    found none). A rank's micro-batch holds other rows than another's, so each finds its
    own; running the prefix once is one more backbone call, which every rank must make
    alike. Collective.

    Only without gradients (scoring): FSDP2 frees a layer's gathered weights after each
    call, and the backward through the prefix's K/V, a second use of the layers in one
    forward, would meet them freed; in the update a shard computes the prefix per row."""
    if torch.is_grad_enabled():
        shared = 0
    device = "cpu"
    if dist.get_backend() == "nccl":
        device = torch.device("cuda", torch.cuda.current_device())
    t = torch.tensor([int(shared)], dtype=torch.long, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MIN)
    return int(t.item())


def add_split_method(model: torch.nn.Module, backbone, head) -> None:
    """Give a sharded causal LM the split LM head of ``ragen.models.logprobs`` (the head
    and its softmax on the wanted positions only, in row chunks: no ``(B, T, V)``
    logits; a prompt prefix all rows share run once) as a method FSDP treats as a
    forward: the root's weights (embeddings, final norm, head) are gathered around it,
    the layers' by their own hooks, and the gradients reduced after its backward
    (``register_fsdp_forward_method``)."""
    from torch.distributed.fsdp import register_fsdp_forward_method

    def method(self, input_ids, attention_mask, position_ids, positions, scale, entropy, share):
        shared = shared_prefix_columns(backbone, input_ids, attention_mask, positions)
        shared = agreed_prefix(shared if share else 0)
        return split_logprobs(
            backbone, head, input_ids, attention_mask, position_ids, positions, scale,
            entropy, shared,
        )  # fmt: skip

    setattr(model, SHARDED_SPLIT, types.MethodType(method, model))
    register_fsdp_forward_method(model, SHARDED_SPLIT)


def add_values_method(critic: torch.nn.Module) -> bool:
    """The same for a sharded critic: its values from the backbone and the value head
    (a prompt prefix all rows share run once), as an FSDP forward method. Not for a head
    with dropout (the critic's own forward applies it). Returns whether it was added."""
    from torch.distributed.fsdp import register_fsdp_forward_method

    backbone, head = getattr(critic, "model", None), getattr(critic, "score", None)
    drop = getattr(critic, "dropout", None)
    if backbone is None or head is None or (isinstance(drop, torch.nn.Dropout) and drop.p > 0):
        return False

    def method(self, input_ids, attention_mask, positions):
        shared = 0
        if positions is not None:  # every row's last column stays outside (it bootstraps)
            last = int(attention_mask.sum(-1).min()) - 1
            shared = shared_prefix_columns(backbone, input_ids, attention_mask, positions, last)
        position_ids = position_ids_from_mask(attention_mask)
        shared = agreed_prefix(shared)
        return split_values(backbone, head, input_ids, attention_mask, position_ids, shared)

    setattr(critic, SHARDED_VALUES, types.MethodType(method, critic))
    register_fsdp_forward_method(critic, SHARDED_VALUES)
    return True


def sum_gradients(model: torch.nn.Module, divide_by: float = 1.0) -> None:
    """Reduce gradients by SUM over the ranks (``divide_by=1``) on every FSDP unit of
    ``model``. ``divide_by=world`` is FSDP's default average (what the mutation test
    checks the equivalence test catches)."""
    from torch.distributed.fsdp import FSDPModule

    for module in model.modules():
        if isinstance(module, FSDPModule):
            module.set_gradient_divide_factor(float(divide_by))
            module.set_force_sum_reduction_for_comms(True)


def meta_skeleton(model: torch.nn.Module) -> torch.nn.Module:
    """A copy of ``model`` whose parameters and buffers live on the meta device (no
    memory): taken before sharding, it becomes a whole model again by
    :func:`materialize`."""
    memo: dict[int, Any] = {}
    for p in model.parameters():
        memo[id(p)] = torch.nn.Parameter(
            torch.empty_like(p, device="meta"), requires_grad=p.requires_grad
        )
    for b in model.buffers():
        memo[id(b)] = torch.empty_like(b, device="meta")
    return copy.deepcopy(model, memo)


def materialize(skeleton: torch.nn.Module, state: dict[str, torch.Tensor], buffers: dict):
    """A whole model from ``skeleton``: the parameters and persistent buffers of
    ``state`` (``model.state_dict()`` names), the other buffers from ``buffers``
    (``named_buffers()`` of the sharded model: FSDP does not shard buffers). Tied
    weights are tied again."""
    model = copy.deepcopy(skeleton)
    model.load_state_dict(state, assign=True, strict=True)
    for name, buf in buffers.items():
        owner, _, leaf = name.rpartition(".")
        module = model.get_submodule(owner) if owner else model
        persistent = leaf not in module._non_persistent_buffers_set
        module.register_buffer(leaf, buf.detach().to("cpu", copy=True), persistent=persistent)
    if hasattr(model, "tie_weights"):
        model.tie_weights()
    return model


# --------------------------------------------------------------------------------------
# whole state <-> shards (collectives: every rank calls these in the same order)
# --------------------------------------------------------------------------------------
def _full(tensor: torch.Tensor) -> torch.Tensor:
    """The whole tensor on CPU (an all-gather for a DTensor)."""
    from torch.distributed.tensor import DTensor

    if isinstance(tensor, DTensor):
        tensor = tensor.full_tensor()
    return tensor.detach().to("cpu", copy=True)


def _unique_state(model: torch.nn.Module) -> Iterable[tuple[str, torch.Tensor, list[str]]]:
    """``(name, tensor, aliases)`` of ``model.state_dict()``, each tensor once (tied
    weights appear under several names)."""
    seen: dict[int, list[str]] = {}
    first: dict[int, tuple[str, torch.Tensor]] = {}
    for name, tensor in model.state_dict(keep_vars=True).items():
        key = id(tensor)
        if key not in seen:
            seen[key], first[key] = [], (name, tensor)
        seen[key].append(name)
    for key, (name, tensor) in first.items():
        yield name, tensor, seen[key]


def gather_model(model: torch.nn.Module, names: set[str] | None = None) -> dict:
    """``model.state_dict()`` whole on CPU (rank 0; other ranks get ``{}``); ``names``:
    only those entries. Collective."""
    rank = dist.get_rank()
    out: dict[str, torch.Tensor] = {}
    for _name, tensor, aliases in _unique_state(model):
        if names is not None and not names.intersection(aliases):
            continue
        full = _full(tensor)
        if rank == 0:
            for alias in aliases:
                if names is None or alias in names:
                    out[alias] = full
    return out


@torch.no_grad()
def scatter_model(model: torch.nn.Module, state: dict[str, torch.Tensor] | None) -> None:
    """Copy rank 0's whole ``state`` (``state_dict`` names; None on other ranks) into
    every rank's shards of ``model``, in place. Collective."""
    from torch.distributed.tensor import DTensor, distribute_tensor

    rank = dist.get_rank()
    for name, tensor, _aliases in _unique_state(model):
        if isinstance(tensor, DTensor):
            src = state[name] if rank == 0 else torch.empty(tensor.shape, dtype=tensor.dtype)
            src = src.to(device=tensor.device, dtype=tensor.dtype)
            part = distribute_tensor(src, tensor.device_mesh, tensor.placements, src_data_rank=0)
            tensor.copy_(part)
        else:
            if rank == 0:
                tensor.copy_(state[name].to(tensor.device, tensor.dtype))
            dist.broadcast(tensor.data, src=0)


def _param_names(model: torch.nn.Module) -> dict[int, str]:
    return {id(p): name for name, p in model.named_parameters()}


def named_optimizer_state(model: torch.nn.Module, optimizer: Any, gather: bool) -> dict:
    """``optimizer``'s state keyed by parameter NAME (rank- and shard-independent):
    ``{"state": {name: {key: tensor}}, "groups": [{hyper-parameters, "params": [names]}]}``.
    ``gather=True``: the optimizer of a sharded model, collective (rank 0 gets whole
    CPU tensors, the others ``{}``)."""
    names = _param_names(model)
    rank = dist.get_rank() if gather else 0
    state: dict[str, dict] = {}
    groups = []
    for group in optimizer.param_groups:
        groups.append(
            {**{k: v for k, v in group.items() if k != "params"},
             "params": [names[id(p)] for p in group["params"]]}
        )  # fmt: skip
        for p in group["params"]:
            entry = optimizer.state.get(p)
            if not entry:
                continue
            whole = {}
            for key in sorted(entry):
                value = entry[key]
                if isinstance(value, torch.Tensor):
                    value = _full(value) if gather else value.detach().to("cpu", copy=True)
                whole[key] = value
            state[names[id(p)]] = whole
    return {"state": state, "groups": groups} if rank == 0 else {}


def load_named_optimizer_state(model: torch.nn.Module, optimizer: Any, named: dict) -> None:
    """Put a :func:`named_optimizer_state` into a plain (unsharded) ``optimizer`` of
    ``model``: its state and its groups' hyper-parameters."""
    by_name = dict(model.named_parameters())
    _set_groups(optimizer, named["groups"])
    for name, entry in named["state"].items():
        p = by_name[name]
        optimizer.state[p] = {
            k: (v.to(p.device) if isinstance(v, torch.Tensor) and v.dim() else v)
            for k, v in entry.items()
        }


def _set_groups(optimizer: Any, groups: list[dict]) -> None:
    if len(groups) != len(optimizer.param_groups):
        raise RuntimeError("optimizer state of another parameter-group layout")
    for group, saved in zip(optimizer.param_groups, groups):
        group.update({k: v for k, v in saved.items() if k != "params"})


@torch.no_grad()
def scatter_optimizer(model: torch.nn.Module, optimizer: Any, named: dict | None) -> None:
    """Rank 0's :func:`named_optimizer_state` (None elsewhere) into every rank's
    sharded ``optimizer``, in place. Collective."""
    from torch.distributed.tensor import DTensor, distribute_tensor

    rank = dist.get_rank()
    # the layout first: the other ranks may hold no state yet (a fresh optimizer)
    layout = [None]
    if rank == 0:
        layout[0] = {
            "groups": named["groups"],
            "state": {
                name: {
                    k: (tuple(v.shape), v.dtype) if isinstance(v, torch.Tensor) else v
                    for k, v in entry.items()
                }
                for name, entry in named["state"].items()
            },
        }
    dist.broadcast_object_list(layout, src=0)
    layout = layout[0]
    _set_groups(optimizer, layout["groups"])
    params = dict(model.named_parameters())
    optimizer.state.clear()
    for name in sorted(layout["state"]):
        p = params[name]
        entry = {}
        for key, spec in layout["state"][name].items():
            if not isinstance(spec, tuple):
                entry[key] = spec
                continue
            shape, dtype = spec
            src = named["state"][name][key] if rank == 0 else torch.empty(shape, dtype=dtype)
            if isinstance(p, DTensor) and tuple(shape) == tuple(p.shape):
                src = src.to(device=p.device, dtype=dtype)
                entry[key] = distribute_tensor(src, p.device_mesh, p.placements, src_data_rank=0)
            else:  # a scalar such as AdamW's step: the same on every rank
                src = src.clone()
                dist.broadcast(src, src=0)
                entry[key] = src
        optimizer.state[p] = entry


# --------------------------------------------------------------------------------------
# a run's models (``ragen.trainer.models.TrainModels``), all at once
# --------------------------------------------------------------------------------------
ROLES = ("actor", "critic", "ref")
OPTIMIZERS = {"actor": "actor_opt", "critic": "critic_opt"}
SCHEDULERS = {"actor": "actor_sched", "critic": "critic_sched"}


def models_of(trainer: Any) -> dict[str, torch.nn.Module]:
    """``{role: model}`` of a ``TrainModels`` (``trainer``: anything with its attributes)."""
    return {r: getattr(trainer, r) for r in ROLES if getattr(trainer, r, None) is not None}


def shard_models(owner: Any, mesh: Any, model_cfg: Any) -> dict[str, torch.nn.Module]:
    """Shard the actor, critic and reference of ``owner`` (a
    ``ragen.trainer.models.TrainModels``) in place, rebuild their optimizers and
    schedulers over the shards (scheduler positions kept; ``model_cfg``: the config's
    ``model`` section, their learning rates and warm-up), and send rank 0's whole state
    (weights and optimizer state, e.g. just resumed) into every rank's shards. Returns
    the meta skeletons of the models (what :func:`materialize` fills)."""
    m = model_cfg
    rank = dist.get_rank()
    models = models_of(owner)
    whole = {}
    if rank == 0:  # captured before sharding replaces the parameters
        for role, model in models.items():
            whole[role] = {k: v.detach() for k, v in model.state_dict().items()}
        for role, attr in OPTIMIZERS.items():
            if role in models:
                opt = getattr(owner, attr)
                whole[attr] = named_optimizer_state(models[role], opt, gather=False)
    skeletons = {role: meta_skeleton(model) for role, model in models.items()}
    for model in models.values():
        shard_model(model, mesh)
    lrs = {"actor": m.actor_lr, "critic": m.critic_lr}
    for role, attr in OPTIMIZERS.items():
        if role not in models:
            continue
        old_sched = getattr(owner, SCHEDULERS[role])
        opt = make_optimizer(models[role], lrs[role], m.weight_decay)
        sched = make_scheduler(opt, m.warmup_steps)
        sched.load_state_dict(old_sched.state_dict())
        setattr(owner, attr, opt)
        setattr(owner, SCHEDULERS[role], sched)
    scatter_trainer(owner, whole if rank == 0 else None)
    return skeletons


def gather_trainer(trainer: Any) -> dict:
    """The whole state of ``trainer``'s sharded models and optimizers on rank 0 (``{}``
    on the others): per model its ``state_dict`` and buffers, per optimizer its
    :func:`named_optimizer_state`. Collective."""
    out: dict[str, Any] = {}
    models = models_of(trainer)
    for role, model in models.items():
        out[role] = gather_model(model)
        out[f"{role}_buffers"] = {k: b.detach() for k, b in model.named_buffers()}
    for role, attr in OPTIMIZERS.items():
        if role in models:
            out[attr] = named_optimizer_state(models[role], getattr(trainer, attr), gather=True)
    return out if dist.get_rank() == 0 else {}


def scatter_trainer(trainer: Any, whole: dict | None) -> None:
    """Rank 0's whole state (:func:`gather_trainer`'s form; None on the other ranks)
    into every rank's shards. Collective."""
    models = models_of(trainer)
    for role, model in models.items():
        scatter_model(model, None if whole is None else whole[role])
    for role, attr in OPTIMIZERS.items():
        if role in models:
            named = None if whole is None else whole[attr]
            scatter_optimizer(models[role], getattr(trainer, attr), named)


def trainable_names(model: torch.nn.Module) -> set[str]:
    return {n for n, p in model.named_parameters() if p.requires_grad}


def local_bytes(tensors: Iterable[torch.Tensor]) -> int:
    """Bytes this rank holds of ``tensors`` (a DTensor's local shard only)."""
    from torch.distributed.tensor import DTensor

    total = 0
    for t in tensors:
        local = t.to_local() if isinstance(t, DTensor) else t
        total += local.numel() * local.element_size()
    return total


def state_bytes(trainer: Any) -> dict[str, int]:
    """What this rank holds of the training state, in bytes: weights (actor, critic,
    reference), gradients, optimizer state. Exact accounting of the tensors, so the
    1/ranks of sharding shows apart from the process's fixed costs."""
    models = models_of(trainer)
    params = list(itertools.chain.from_iterable(m.parameters() for m in models.values()))
    grads = [p.grad for p in params if p.grad is not None]
    opt_tensors = []
    for attr in OPTIMIZERS.values():
        opt = getattr(trainer, attr, None)
        if opt is None:
            continue
        for entry in opt.state.values():
            opt_tensors += [v for v in entry.values() if isinstance(v, torch.Tensor)]
    return {
        "weights": local_bytes(params),
        "gradients": local_bytes(grads),
        "optimizer": local_bytes(opt_tensors),
    }
