"""How a model goes into a checkpoint and comes back out of it.

Every model is saved as a plain HF folder (``save_pretrained``; a LoRA model merged, with
its adapter beside it) or, for a module without ``save_pretrained``, as
``role/model.safetensors``. Loading reads the weights on the CPU, refuses NaN/inf, and
checks every parameter's name and shape against the model before anything is written
into it, so a checkpoint of another architecture fails in one line naming what differs.
"""

from __future__ import annotations

import copy
import inspect
from collections.abc import Mapping
from pathlib import Path

import torch

from ragen.errors import CheckpointError, NonFiniteError
from ragen.models.finite import nonfinite_tensors

from .checkpoint_files import fix_hint, summarize

PLAIN_WEIGHTS = "model.safetensors"  # weights of a model without ``save_pretrained``


def unwrap(model: torch.nn.Module) -> torch.nn.Module:
    """Strip torch.compile / DistributedDataParallel wrappers (they save with odd key names)."""
    model = getattr(model, "_orig_mod", model)
    if isinstance(model, torch.nn.parallel.DistributedDataParallel):
        model = model.module
    return model


def is_peft(model: torch.nn.Module) -> bool:
    try:
        from peft import PeftModel
    except ImportError:  # peft not installed: cannot be a PEFT model
        return False
    return isinstance(model, PeftModel)


def _save_hf(model: torch.nn.Module, folder: Path) -> None:
    # transformers 5 always writes safetensors and dropped the flag; 4.x needs it.
    kwargs = {}
    if "safe_serialization" in inspect.signature(model.save_pretrained).parameters:
        kwargs["safe_serialization"] = True
    model.save_pretrained(str(folder), **kwargs)


def save_model_folder(model: torch.nn.Module, root: Path, role: str) -> str:
    """Save ``model`` as ``root/role`` (+ ``root/role_adapter`` for PEFT); return its kind.

    kinds: ``"hf"`` (save_pretrained folder), ``"peft"`` (adapter + merged HF folder),
    ``"state_dict"`` (plain module: ``role/model.safetensors``).
    """
    from safetensors.torch import save_model

    model = unwrap(model)
    if is_peft(model):
        model.save_pretrained(str(root / f"{role}_adapter"), safe_serialization=True)
        # Merge on a copy: merging in place and unmerging later is not exact in low
        # precision, and the training model must stay untouched. Costs one model copy.
        merged = copy.deepcopy(model).merge_and_unload()
        _save_hf(merged, root / role)
        del merged
        return "peft"
    if hasattr(model, "save_pretrained") and hasattr(model, "config"):
        _save_hf(model, root / role)
        return "hf"
    (root / role).mkdir()
    save_model(model, str(root / role / PLAIN_WEIGHTS))  # handles tied (shared) tensors
    return "state_dict"


def read_safetensors(folder: Path, exclude_adapter: bool = True) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    files = sorted(folder.glob("*.safetensors"))
    if exclude_adapter:
        files = [f for f in files if not f.name.startswith("adapter_model")]
    if not files:
        raise CheckpointError(f"{folder} holds no .safetensors weights. {fix_hint(folder.parent)}")
    state: dict[str, torch.Tensor] = {}
    for file in files:  # sharded checkpoints: model-00001-of-00002.safetensors, ...
        state.update(load_file(str(file), device="cpu"))
    return state


def prepare_model_load(
    model: torch.nn.Module, folder: Path, role: str, saved_kind: str | None
) -> tuple[torch.nn.Module, dict, bool]:
    """Read the weights for ``model`` and check names/shapes; returns (model, state, is_adapter)."""
    if saved_kind is None:
        raise CheckpointError(f"checkpoint {folder} has no {role}; pass {role}=None")
    if is_peft(model):
        from peft import get_peft_model_state_dict

        if saved_kind != "peft":
            raise CheckpointError(
                f"checkpoint {folder} holds a full {role} model, but the {role} passed to load() "
                "is a LoRA (PEFT) model; build it without LoRA (model.lora.rank=0) to resume"
            )
        adapter_files = sorted((folder / f"{role}_adapter").rglob("adapter_model.safetensors"))
        if not adapter_files:
            raise CheckpointError(
                f"{folder / (role + '_adapter')} has no adapter_model.safetensors. {fix_hint(folder)}"
            )
        from safetensors.torch import load_file

        state = load_file(str(adapter_files[0]), device="cpu")
        expected = get_peft_model_state_dict(model, adapter_name=model.active_adapter)
        check_names_and_shapes(expected, state, f"{folder / (role + '_adapter')}", tied={})
        check_finite_state(state, folder / f"{role}_adapter")
        return model, state, True
    # A plain model takes the full weights (the merged ones for a PEFT checkpoint).
    state = read_safetensors(folder / role)
    expected = model.state_dict()
    check_names_and_shapes(expected, state, str(folder / role), tied=_tied_names(expected))
    check_finite_state(state, folder / role)
    return model, state, False


def check_finite_state(state: Mapping[str, torch.Tensor], where: Path) -> None:
    """Refuse weights with NaN/inf before they replace the model's (``ragen.models.finite``)."""
    bad = nonfinite_tensors(state.items())
    if bad:
        raise NonFiniteError(
            f"weights in {where}: {len(bad)} of {len(state)} tensors hold NaN or inf "
            f"({summarize(bad)}). Fix: resume from an earlier checkpoint "
            "(trainer.resume=RUN/checkpoints/step_N)"
        )


def apply_model_state(model: torch.nn.Module, state: dict, is_adapter: bool) -> None:
    if is_adapter:
        from peft import set_peft_model_state_dict

        set_peft_model_state_dict(model, state, adapter_name=model.active_adapter)
        return
    # Names/shapes were checked already; strict=False only tolerates omitted tied copies.
    with torch.no_grad():
        model.load_state_dict(state, strict=False)


def _tied_names(state: Mapping[str, torch.Tensor]) -> dict[str, set[str]]:
    """name -> other names sharing the same storage (tied embeddings save only one copy)."""
    by_ptr: dict[tuple, list[str]] = {}
    for name, tensor in state.items():
        if tensor.device.type == "meta":
            continue
        by_ptr.setdefault((tensor.data_ptr(), tuple(tensor.shape)), []).append(name)
    return {n: set(group) - {n} for group in by_ptr.values() if len(group) > 1 for n in group}


def check_names_and_shapes(
    expected: Mapping[str, torch.Tensor],
    state: Mapping[str, torch.Tensor],
    where: str,
    tied: Mapping[str, set[str]],
) -> None:
    """Like ``load_state_dict(strict=True)`` but with a short summary instead of every key."""
    missing = [k for k in expected if k not in state and not (tied.get(k, set()) & state.keys())]
    unexpected = [k for k in state if k not in expected]
    shapes = [
        f"{k} {tuple(state[k].shape)} vs model {tuple(expected[k].shape)}"
        for k in state
        if k in expected and tuple(state[k].shape) != tuple(expected[k].shape)
    ]
    problems = []
    for label, items in (
        ("missing", missing),
        ("unexpected", unexpected),
        ("shape mismatch", shapes),
    ):
        if items:
            problems.append(f"{len(items)} {label} ({summarize(items)})")
    if problems:
        raise CheckpointError(
            f"weights in {where} do not fit the model: {'; '.join(problems)}. The model was "
            "built with a different architecture/vocabulary/LoRA setup than the checkpoint; "
            "use the same model settings, or start a new run folder"
        )


def check_optimizer_layout(opt: torch.optim.Optimizer, saved: Mapping, where: str) -> None:
    ours = [len(g["params"]) for g in opt.param_groups]
    theirs = [len(g["params"]) for g in saved.get("param_groups", [])]
    if ours != theirs:
        raise CheckpointError(
            f"{where} state does not fit: saved param groups hold {theirs} parameters, the "
            f"optimizer now holds {ours}; build the optimizer over the same parameters as before"
        )


def module_device(model: torch.nn.Module | None) -> torch.device:
    if model is None:
        return torch.device("cpu")
    for p in model.parameters():
        return p.device
    return torch.device("cpu")
