"""Atomic, verifiable training checkpoints that users can load without ragen.

Layout of one checkpoint (``run_dir/checkpoints/step_000123/``)::

    actor/               HF folder (config.json, model.safetensors, tokenizer files):
                         ``AutoModelForCausalLM.from_pretrained(ckpt / "actor")`` just works.
                         For a LoRA (PEFT) actor this holds the MERGED full model.
    actor_adapter/       only for a PEFT actor: the adapter (adapter_config.json,
                         adapter_model.safetensors); resume restores these weights.
    critic/              HF folder of the critic (or ``model.safetensors`` of a plain module)
    critic_adapter/      only for a PEFT critic
    optim.pt             {"optimizers": {name: state_dict}, "schedulers": {name: state_dict}}
    rng.pt               python ``random``, numpy, torch CPU and CUDA generator states
    trainer_state.json   the loop's JSON state (step, seed counters, ...)
    train_config.json    the resolved training config (for compatibility checks)
    manifest.json        written LAST: size + sha256 of every file above

Why this shape (docs/ARCHITECTURE.md, "Pitfalls": "checkpoints only in a distributed-shard format
users cannot load"): every model lives in plain HF safetensors format, so evaluation,
export and sharing need nothing but ``transformers``.

Atomicity: a checkpoint is written into ``step_000123.tmp/``; the manifest is written
last, and only then is the folder renamed to ``step_000123/``. A crash therefore leaves
either a complete, verifiable checkpoint or a ``.tmp`` folder that is ignored.
``latest()`` and ``load()`` re-hash every file against the manifest and raise
:class:`CheckpointError` (naming the folder and the fix) instead of silently skipping a
damaged checkpoint: resuming from an older step than the user thinks is a silent bug.
"""

from __future__ import annotations

import copy
import dataclasses
import inspect
import json
import os
import random
import shutil
import time
import warnings
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ragen.checkpoint_verify import file_problems, sha256_file, stat_fingerprint
from ragen.disk_space import SMALL_FILES, free_bytes, is_disk_full, mb
from ragen.errors import (
    CheckpointError,
    DiskFullError,
    MissingFileError,
    NonFiniteError,
)
from ragen.models.finite import check_finite_weights, nonfinite_tensors
from ragen.models.hf_setup import quiet_transformers
from ragen.run_layout import (
    CHECKPOINTS,
    STEP_DIR,
    TMP_DIR,
    TRAIN_CONFIG,
    checkpoint_dirs,
    step_dir_name,
    step_of,
)

FORMAT_NAME = "ragen-checkpoint"
FORMAT_VERSION = 1
MANIFEST = "manifest.json"
TRAINER_STATE = "trainer_state.json"
OPTIM_FILE = "optim.pt"
RNG_FILE = "rng.pt"
PLAIN_WEIGHTS = "model.safetensors"  # weights of a model without ``save_pretrained``

# Config keys whose change makes a checkpoint unusable for resuming. Architecture and
# vocabulary changes are caught anyway by the parameter name/shape check on load.
DEFAULT_COMPAT_KEYS = (
    "model.lora.rank",
    "model.lora.alpha",
    "model.lora.target_modules",
    "algo.use_critic",
)

_MISSING = "<missing>"


class CheckpointWarning(UserWarning):
    """Something worth knowing that does not stop training (e.g. a leftover ``.tmp`` folder)."""


# ------------------------------------------------------------------------------- manager
class CheckpointManager:
    """Save, find, verify and load checkpoints under ``run_dir/checkpoints/``.

    Args:
        run_dir: the run folder; checkpoints go to ``run_dir/checkpoints/step_XXXXXX/``.
        keep_last: after each successful save keep only the newest ``keep_last`` complete
            checkpoints (``None`` keeps all). The checkpoint just written is never deleted.
        compat_keys: dotted config keys compared by :meth:`load` when a ``config`` is given
            (default :data:`DEFAULT_COMPAT_KEYS`).
        verify: ``"sha256"`` (default) re-hashes every file on ``latest()``/``load()``;
            ``"size"`` only checks presence and sizes (fast for multi-GB models).

    Only one process (rank 0) should save into a run folder.
    """

    def __init__(
        self,
        run_dir: str | Path,
        keep_last: int | None = None,
        *,
        compat_keys: Iterable[str] = DEFAULT_COMPAT_KEYS,
        verify: str = "sha256",
    ):
        if keep_last is not None and (not isinstance(keep_last, int) or keep_last < 1):
            raise ValueError(f"keep_last must be a positive integer or None, got {keep_last!r}")
        if verify not in ("sha256", "size"):
            raise ValueError(f"verify must be 'sha256' or 'size', got {verify!r}")
        self.run_dir = Path(run_dir)
        self.root = self.run_dir / CHECKPOINTS
        self.keep_last = keep_last
        self.compat_keys = tuple(compat_keys)
        self.verify_mode = verify
        self._reported_tmp: set[Path] = set()
        # path -> (file stat fingerprint, manifest): avoids hashing twice for latest() + load()
        self._verified: dict[Path, tuple[tuple, dict]] = {}

    # ------------------------------------------------------------------ discovery
    def path_for(self, step: int) -> Path:
        return self.root / step_dir_name(step)

    def list(self) -> list[Path]:
        """Checkpoint folders (``step_XXXXXX``), oldest first. Names only: not verified.

        Leftover ``step_XXXXXX.tmp`` folders from an interrupted save are ignored (and
        reported once with a :class:`CheckpointWarning`).
        """
        if self.root.is_dir():
            for child in self.root.iterdir():
                if child.is_dir() and TMP_DIR.match(child.name) and child not in self._reported_tmp:
                    self._reported_tmp.add(child)
                    warnings.warn(
                        f"ignoring incomplete checkpoint {child} (left by an interrupted save); "
                        "it is safe to delete",
                        CheckpointWarning,
                        stacklevel=2,
                    )
        return checkpoint_dirs(self.root)

    def latest(self) -> Path | None:
        """The newest checkpoint, verified against its manifest; ``None`` if there is none.

        Raises :class:`CheckpointError` if the newest checkpoint is damaged: it is never
        skipped silently, because resuming from an older step would surprise the user.
        """
        checkpoints = self.list()
        if not checkpoints:
            return None
        self.verify(checkpoints[-1])
        return checkpoints[-1]

    def _existing(self, path: str | int | Path) -> Path:
        folder = self.path_for(path) if isinstance(path, int) else Path(path)
        if not folder.is_dir():
            have = ", ".join(p.name for p in self.list()) or "none"
            raise MissingFileError(
                f"checkpoint {folder} does not exist (checkpoints in {self.root}: {have})"
            )
        return folder

    # ------------------------------------------------------------------ verification
    def verify(self, path: str | Path) -> dict:
        """Check ``path`` against its manifest and return the manifest.

        Raises :class:`CheckpointError` for a missing/unreadable manifest, a missing
        file, a size or sha256 mismatch.
        """
        folder = Path(path)
        manifest_path = folder / MANIFEST
        if not manifest_path.is_file():
            raise CheckpointError(
                f"checkpoint {folder} has no {MANIFEST}, so it is incomplete or was not written "
                f"by ragen. {_fix_hint(folder)}"
            )
        try:
            manifest = json.loads(manifest_path.read_text())
            files = manifest["files"]
            if manifest.get("format") != FORMAT_NAME:
                raise ValueError(f"format is {manifest.get('format')!r}")
        except (OSError, ValueError, KeyError, TypeError) as err:
            raise CheckpointError(
                f"checkpoint {folder}: cannot read {MANIFEST} ({err}). {_fix_hint(folder)}"
            ) from None
        if manifest.get("version", 0) > FORMAT_VERSION:
            raise CheckpointError(
                f"checkpoint {folder} has format version {manifest['version']}, newer than this "
                f"ragen understands ({FORMAT_VERSION}). Upgrade ragen to load it."
            )
        fingerprint = stat_fingerprint(folder, files)
        cached = self._verified.get(folder.resolve())
        if cached is not None and cached[0] == fingerprint and fingerprint is not None:
            return cached[1]
        problems = file_problems(folder, files, self.verify_mode)
        if problems:
            shown = "; ".join(problems[:5]) + (
                f"; and {len(problems) - 5} more" if len(problems) > 5 else ""
            )
            raise CheckpointError(f"checkpoint {folder} is corrupt: {shown}. {_fix_hint(folder)}")
        self._verified[folder.resolve()] = (fingerprint, manifest)
        return manifest

    # ------------------------------------------------------------------ save
    def save(
        self,
        step: int,
        *,
        actor: torch.nn.Module,
        tokenizer: Any = None,
        critic: torch.nn.Module | None = None,
        optimizers: Mapping[str, torch.optim.Optimizer] | None = None,
        schedulers: Mapping[str, Any] | None = None,
        trainer_state: Mapping[str, Any] | None = None,
        config: Any = None,
        overwrite: bool = False,
    ) -> Path:
        """Write a complete checkpoint for ``step`` and return its folder.

        ``trainer_state`` must be JSON-serializable; ``"step"`` is added to it. ``config``
        (a dict, OmegaConf ``DictConfig`` or dataclass) is stored as ``train_config.json``.
        An existing checkpoint for ``step`` raises :class:`CheckpointError` unless
        ``overwrite=True`` (then it is replaced only after the new one is complete).
        """
        if not isinstance(step, int) or isinstance(step, bool) or step < 0:
            raise ValueError(f"step must be a non-negative int, got {step!r}")
        final = self.path_for(step)
        if final.exists() and not overwrite:
            raise CheckpointError(
                f"checkpoint {final} already exists; pass overwrite=True to replace it, or "
                "resume from it instead of re-training that step"
            )

        for role, model in (("actor", actor), ("critic", critic)):
            if model is not None:  # a NaN checkpoint would load and "evaluate" as garbage
                check_finite_weights(
                    _unwrap(model),
                    f"refusing to save checkpoint {final}: the {role}",
                    "the run diverged; lower the learning rate (model.actor_lr / "
                    "model.critic_lr) and resume from the previous checkpoint",
                )
        state = dict(trainer_state or {})
        state["step"] = step
        state_text = _to_json(state, "trainer_state")
        config_text = None if config is None else _to_json(_config_to_dict(config), "config")

        self.root.mkdir(parents=True, exist_ok=True)
        tmp = final.with_name(final.name + ".tmp")
        if tmp.exists():  # a previous attempt at this very step crashed; start clean
            shutil.rmtree(tmp)
        tmp.mkdir()

        try:
            with quiet_transformers():  # no "Writing model shards" bar per checkpoint
                actor_kind = _save_model(actor, tmp, "actor")
                if tokenizer is not None:
                    tokenizer.save_pretrained(str(tmp / "actor"))
                critic_kind = None if critic is None else _save_model(critic, tmp, "critic")
            optimizers, schedulers = dict(optimizers or {}), dict(schedulers or {})
            torch.save(
                {
                    "optimizers": {name: opt.state_dict() for name, opt in optimizers.items()},
                    "schedulers": {name: sch.state_dict() for name, sch in schedulers.items()},
                },
                tmp / OPTIM_FILE,
            )
            torch.save(_capture_rng(), tmp / RNG_FILE)
            (tmp / TRAINER_STATE).write_text(state_text)
            if config_text is not None:
                (tmp / TRAIN_CONFIG).write_text(config_text)

            manifest = {
                "format": FORMAT_NAME,
                "version": FORMAT_VERSION,
                "step": step,
                "created_unix": time.time(),
                "actor": actor_kind,
                "critic": critic_kind,
                "optimizers": sorted(optimizers),
                "schedulers": sorted(schedulers),
                "has_config": config_text is not None,
                "files": _describe_files(tmp),  # hashing also fsyncs every file
            }
            _write_synced(tmp / MANIFEST, json.dumps(manifest, indent=1, sort_keys=True))
        except BaseException as err:
            # Never leave a half-written folder behind from a failure we can see (a hard
            # crash still can; list() ignores it and the next save of this step removes it).
            shutil.rmtree(tmp, ignore_errors=True)
            needed = _checkpoint_bytes(actor, critic, optimizers or {})
            if isinstance(err, Exception) and is_disk_full(err, self.root, needed):
                raise self._disk_full(step, needed) from None
            raise

        if final.exists():  # overwrite=True: swap only once the new checkpoint is complete
            old = final.with_name(final.name + ".old")
            if old.exists():
                shutil.rmtree(old)
            os.replace(final, old)
            os.replace(tmp, final)
            shutil.rmtree(old)
        else:
            os.replace(tmp, final)
        _fsync_dir(self.root)
        self._verified.pop(final.resolve(), None)
        self._prune(keep=final)
        return final

    def _disk_full(self, step: int, needed: int) -> DiskFullError:
        """The one-line error after a save of ``step`` ran out of space (its ``.tmp``
        folder already removed, so the previous checkpoints are as they were)."""
        free = free_bytes(self.root) or 0
        earlier = [p for p in self.list() if step_of(p) < step]
        kept = (
            f"the previous checkpoint {earlier[-1]} is intact"
            if earlier
            else "there is no earlier checkpoint"
        )
        return DiskFullError(
            f"disk full while saving step {step} to {self.root} (needed ~{mb(needed)}, "
            f"{mb(free)} free); the step's checkpoint was not written and {kept}. Fix: free "
            "space on that disk (trainer.keep_last=N keeps fewer checkpoints), then resume the run"
        )

    def move_after(self, step: int, dest: str | Path) -> list[Path]:
        """Move every checkpoint later than ``step`` (complete or ``.tmp``) into ``dest``.

        For resuming from an earlier checkpoint: the later ones are superseded but kept
        (never deleted), and the resumed run can save those step numbers again. Returns
        the new paths, oldest first.
        """
        if not self.root.is_dir():
            return []
        later = []
        for child in self.root.iterdir():
            match = STEP_DIR.match(child.name) or TMP_DIR.match(child.name)
            if match and child.is_dir() and int(match.group(1)) > step:
                later.append((int(match.group(1)), child))
        moved = []
        for _, folder in sorted(later):
            Path(dest).mkdir(parents=True, exist_ok=True)
            target = Path(dest) / folder.name
            os.replace(folder, target)  # same file system: a rename, instant and atomic
            self._verified.pop(folder.resolve(), None)
            moved.append(target)
        if moved:
            _fsync_dir(self.root)
        return moved

    def _prune(self, keep: Path) -> None:
        if self.keep_last is None:
            return
        checkpoints = [p for p in self.list() if (p / MANIFEST).is_file()]
        for old in checkpoints[: max(len(checkpoints) - self.keep_last, 0)]:
            if old != keep:
                shutil.rmtree(old)
                self._verified.pop(old.resolve(), None)

    # ------------------------------------------------------------------ load
    def load(
        self,
        path: str | int | Path,
        *,
        actor: torch.nn.Module | None,
        critic: torch.nn.Module | None = None,
        optimizers: Mapping[str, torch.optim.Optimizer] | None = None,
        schedulers: Mapping[str, Any] | None = None,
        config: Any = None,
        restore_rng: bool = True,
        compat_keys: Iterable[str] | None = None,
        trust_pickle: bool = False,
    ) -> dict:
        """Restore a checkpoint IN PLACE and return its ``trainer_state`` dict.

        ``path`` is a checkpoint folder or a step number. The checkpoint is verified
        first; then, before anything is modified, the config (``compat_keys`` of
        ``config`` vs the saved one), parameter names/shapes and optimizer layouts are
        checked, so a failed load leaves the models untouched. Weights are read
        memory-mapped on CPU and copied into the parameters wherever they live;
        optimizer state is loaded onto the actor's device (any saving device works).

        ``trust_pickle=True`` allows ``optim.pt``/``rng.pt`` objects that
        ``torch.load(weights_only=True)`` refuses (only for checkpoints you trust).
        """
        folder = self._existing(path)
        manifest = self.verify(folder)
        optimizers, schedulers = dict(optimizers or {}), dict(schedulers or {})

        if config is not None and manifest.get("has_config"):
            saved = json.loads((folder / TRAIN_CONFIG).read_text())
            keys = self.compat_keys if compat_keys is None else tuple(compat_keys)
            diffs = config_differences(saved, _config_to_dict(config), keys)
            if diffs:
                raise CheckpointError(
                    f"checkpoint {folder} was trained with an incompatible config: "
                    + "; ".join(diffs)
                    + ". Use the same settings to resume, or start a new run folder."
                )
        if critic is not None and manifest.get("critic") is None:
            raise CheckpointError(
                f"checkpoint {folder} has no critic but a critic was passed to load(); "
                "resume with the same algorithm (algo.use_critic) or start a new run folder"
            )

        # Phase 1: read and check everything; nothing is modified yet.
        plan: list[tuple[torch.nn.Module, dict, bool]] = []
        for role, model in (("actor", actor), ("critic", critic)):
            if model is not None:
                plan.append(_prepare_model_load(_unwrap(model), folder, role, manifest[role]))
        device = _module_device(actor if actor is not None else critic)
        optim_state = self._torch_load(folder / OPTIM_FILE, device, trust_pickle)
        for kind, given in (("optimizers", optimizers), ("schedulers", schedulers)):
            missing = sorted(set(given) - set(optim_state[kind]))
            if missing:
                raise CheckpointError(
                    f"checkpoint {folder} has no state for {kind} {missing} (it has "
                    f"{sorted(optim_state[kind])}); pass the same names that were saved"
                )
        for name, opt in optimizers.items():
            _check_optimizer_layout(
                opt, optim_state["optimizers"][name], f"{folder}: optimizer {name!r}"
            )
        rng_state = (
            self._torch_load(folder / RNG_FILE, "cpu", trust_pickle) if restore_rng else None
        )

        # Phase 2: apply.
        for model, state, is_adapter in plan:
            _apply_model_state(model, state, is_adapter)
        for name, opt in optimizers.items():
            opt.load_state_dict(optim_state["optimizers"][name])
        for name, sch in schedulers.items():
            sch.load_state_dict(optim_state["schedulers"][name])
        if rng_state is not None:
            _restore_rng(rng_state)
        return json.loads((folder / TRAINER_STATE).read_text())

    @staticmethod
    def _torch_load(file: Path, device: Any, trust_pickle: bool) -> Any:
        try:
            return torch.load(file, map_location=device, weights_only=not trust_pickle)
        except Exception as err:  # noqa: BLE001 - unpickling errors come in many types
            if not trust_pickle and "weights only" in str(err).lower().replace("_", " "):
                raise CheckpointError(
                    f"{file} holds objects that safe loading refuses ({str(err).splitlines()[0]}); "
                    "if you trust this checkpoint, pass trust_pickle=True"
                ) from None
            raise CheckpointError(f"cannot read {file} ({err}). {_fix_hint(file.parent)}") from None


# ------------------------------------------------------------------------------- models
def _unwrap(model: torch.nn.Module) -> torch.nn.Module:
    """Strip torch.compile / DistributedDataParallel wrappers (they save with odd key names)."""
    model = getattr(model, "_orig_mod", model)
    if isinstance(model, torch.nn.parallel.DistributedDataParallel):
        model = model.module
    return model


def _is_peft(model: torch.nn.Module) -> bool:
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


def _save_model(model: torch.nn.Module, root: Path, role: str) -> str:
    """Save ``model`` as ``root/role`` (+ ``root/role_adapter`` for PEFT); return its kind.

    kinds: ``"hf"`` (save_pretrained folder), ``"peft"`` (adapter + merged HF folder),
    ``"state_dict"`` (plain module: ``role/model.safetensors``).
    """
    from safetensors.torch import save_model

    model = _unwrap(model)
    if _is_peft(model):
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


def _read_safetensors(folder: Path, exclude_adapter: bool = True) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    files = sorted(folder.glob("*.safetensors"))
    if exclude_adapter:
        files = [f for f in files if not f.name.startswith("adapter_model")]
    if not files:
        raise CheckpointError(f"{folder} holds no .safetensors weights. {_fix_hint(folder.parent)}")
    state: dict[str, torch.Tensor] = {}
    for file in files:  # sharded checkpoints: model-00001-of-00002.safetensors, ...
        state.update(load_file(str(file), device="cpu"))
    return state


def _prepare_model_load(
    model: torch.nn.Module, folder: Path, role: str, saved_kind: str | None
) -> tuple[torch.nn.Module, dict, bool]:
    """Read the weights for ``model`` and check names/shapes; returns (model, state, is_adapter)."""
    if saved_kind is None:
        raise CheckpointError(f"checkpoint {folder} has no {role}; pass {role}=None")
    if _is_peft(model):
        from peft import get_peft_model_state_dict

        if saved_kind != "peft":
            raise CheckpointError(
                f"checkpoint {folder} holds a full {role} model, but the {role} passed to load() "
                "is a LoRA (PEFT) model; build it without LoRA (model.lora.rank=0) to resume"
            )
        adapter_files = sorted((folder / f"{role}_adapter").rglob("adapter_model.safetensors"))
        if not adapter_files:
            raise CheckpointError(
                f"{folder / (role + '_adapter')} has no adapter_model.safetensors. {_fix_hint(folder)}"
            )
        from safetensors.torch import load_file

        state = load_file(str(adapter_files[0]), device="cpu")
        expected = get_peft_model_state_dict(model, adapter_name=model.active_adapter)
        _check_names_and_shapes(expected, state, f"{folder / (role + '_adapter')}", tied={})
        _check_finite_state(state, folder / f"{role}_adapter")
        return model, state, True
    # A plain model takes the full weights (the merged ones for a PEFT checkpoint).
    state = _read_safetensors(folder / role)
    expected = model.state_dict()
    _check_names_and_shapes(expected, state, str(folder / role), tied=_tied_names(expected))
    _check_finite_state(state, folder / role)
    return model, state, False


def _check_finite_state(state: Mapping[str, torch.Tensor], where: Path) -> None:
    """Refuse weights with NaN/inf before they replace the model's (``ragen.models.finite``)."""
    bad = nonfinite_tensors(state.items())
    if bad:
        raise NonFiniteError(
            f"weights in {where}: {len(bad)} of {len(state)} tensors hold NaN or inf "
            f"({_summarize(bad)}). Fix: resume from an earlier checkpoint "
            "(trainer.resume=RUN/checkpoints/step_N)"
        )


def _apply_model_state(model: torch.nn.Module, state: dict, is_adapter: bool) -> None:
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


def _check_names_and_shapes(
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
            problems.append(f"{len(items)} {label} ({_summarize(items)})")
    if problems:
        raise CheckpointError(
            f"weights in {where} do not fit the model: {'; '.join(problems)}. The model was "
            "built with a different architecture/vocabulary/LoRA setup than the checkpoint; "
            "use the same model settings, or start a new run folder"
        )


def _check_optimizer_layout(opt: torch.optim.Optimizer, saved: Mapping, where: str) -> None:
    ours = [len(g["params"]) for g in opt.param_groups]
    theirs = [len(g["params"]) for g in saved.get("param_groups", [])]
    if ours != theirs:
        raise CheckpointError(
            f"{where} state does not fit: saved param groups hold {theirs} parameters, the "
            f"optimizer now holds {ours}; build the optimizer over the same parameters as before"
        )


def _module_device(model: torch.nn.Module | None) -> torch.device:
    if model is None:
        return torch.device("cpu")
    for p in model.parameters():
        return p.device
    return torch.device("cpu")


# ------------------------------------------------------------------------------- RNG
def _capture_rng() -> dict:
    """All generator states, as tensors/ints so ``torch.load(weights_only=True)`` reads them."""
    np_state = np.random.get_state(legacy=False)
    state = {
        "python": random.getstate(),
        "numpy": {
            "bit_generator": np_state["bit_generator"],
            "key": torch.from_numpy(np_state["state"]["key"].astype(np.int64)),
            "pos": int(np_state["state"]["pos"]),
            "has_gauss": int(np_state["has_gauss"]),
            "gauss": float(np_state["gauss"]),
        },
        "torch_cpu": torch.get_rng_state(),
        "torch_cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
    }
    return state


def _restore_rng(state: Mapping) -> None:
    random.setstate(_as_tuple(state["python"]))
    npst = state["numpy"]
    np.random.set_state(
        {
            "bit_generator": npst["bit_generator"],
            "state": {"key": npst["key"].numpy().astype(np.uint32), "pos": npst["pos"]},
            "has_gauss": npst["has_gauss"],
            "gauss": npst["gauss"],
        }
    )
    torch.set_rng_state(state["torch_cpu"].cpu())
    cuda_states = state.get("torch_cuda") or []
    if torch.cuda.is_available() and cuda_states:
        n = min(len(cuda_states), torch.cuda.device_count())
        if n != len(cuda_states) or n != torch.cuda.device_count():
            warnings.warn(
                f"checkpoint saved {len(cuda_states)} CUDA RNG states, this machine has "
                f"{torch.cuda.device_count()} GPUs; restored the first {n}",
                CheckpointWarning,
                stacklevel=3,
            )
        for i in range(n):
            torch.cuda.set_rng_state(cuda_states[i].cpu(), device=i)


def _as_tuple(value: Any) -> Any:
    """``random.setstate`` needs tuples; be lenient if a state went through lists."""
    if isinstance(value, list):
        return tuple(_as_tuple(v) for v in value)
    return value


# ------------------------------------------------------------------------------- config
def _config_to_dict(config: Any) -> dict:
    """A plain, JSON-ready dict from a dict, an OmegaConf ``DictConfig`` or a dataclass."""
    if type(config).__module__.startswith("omegaconf"):
        from omegaconf import OmegaConf

        return OmegaConf.to_container(config, resolve=True)
    if dataclasses.is_dataclass(config) and not isinstance(config, type):
        return dataclasses.asdict(config)
    if isinstance(config, Mapping):
        return dict(config)
    raise TypeError(
        f"config must be a dict, an OmegaConf DictConfig or a dataclass, got {type(config).__name__}"
    )


def _get_dotted(tree: Mapping, key: str) -> Any:
    node: Any = tree
    for part in key.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return _MISSING
        node = node[part]
    return node


def config_differences(saved: Mapping, current: Mapping, keys: Iterable[str]) -> list[str]:
    """``["model.lora.rank: checkpoint=8, now=0", ...]`` for every key whose value differs."""
    diffs = []
    for key in keys:
        a, b = _get_dotted(saved, key), _get_dotted(current, key)
        if a != b:
            diffs.append(f"{key}: checkpoint={a!r}, now={b!r}")
    return diffs


# ------------------------------------------------------------------------------- disk full
def _checkpoint_bytes(
    actor: torch.nn.Module, critic: torch.nn.Module | None, optimizers: Mapping[str, Any]
) -> int:
    """About how many bytes a checkpoint of these models and optimizers takes."""
    total = 0
    for model in (actor, critic):
        if model is not None:
            total += sum(t.numel() * t.element_size() for t in model.state_dict().values())
    for opt in optimizers.values():
        for state in opt.state.values():
            total += sum(
                v.numel() * v.element_size() for v in state.values() if isinstance(v, torch.Tensor)
            )
    return total + SMALL_FILES


# ------------------------------------------------------------------------------- files
def _to_json(value: Any, what: str) -> str:
    try:
        return json.dumps(value, indent=1, sort_keys=True)
    except (TypeError, ValueError) as err:
        raise TypeError(
            f"{what} must be JSON-serializable ({err}); convert tensors/arrays with .item() / .tolist()"
        ) from None


def _describe_files(folder: Path) -> dict[str, dict]:
    """``{relative path: {"size", "sha256"}}`` of every file; also fsyncs them to disk."""
    files = {}
    for file in sorted(p for p in folder.rglob("*") if p.is_file()):
        rel = file.relative_to(folder).as_posix()
        files[rel] = {"size": file.stat().st_size, "sha256": sha256_file(file, fsync=True)}
    return files


def _write_synced(file: Path, text: str) -> None:
    with open(file, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())


def _fsync_dir(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:  # not supported on every platform/filesystem
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _summarize(items: list[str], n: int = 3) -> str:
    shown = ", ".join(items[:n])
    return shown + (f", ... {len(items) - n} more" if len(items) > n else "")


def _fix_hint(folder: Path) -> str:
    return (
        f"Delete {folder} to fall back to the previous checkpoint, or resume from a specific "
        "checkpoint folder (trainer.resume=PATH)"
    )
