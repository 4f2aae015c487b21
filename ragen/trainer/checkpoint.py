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

Here: the format and :class:`CheckpointManager` (save, verify, load, prune, the RNG
states, the config keys a resume must share). How a model goes in and comes back out:
:mod:`ragen.trainer.checkpoint_models`; how the files reach the disk:
:mod:`ragen.trainer.checkpoint_files`.
"""

from __future__ import annotations

import dataclasses
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

from ragen.checkpoint_verify import file_problems, stat_fingerprint
from ragen.disk_space import SMALL_FILES, free_bytes, is_disk_full, mb
from ragen.errors import (
    CheckpointError,
    DiskFullError,
    MissingFileError,
)
from ragen.models.finite import check_finite_weights
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

from .checkpoint_files import describe_files, fix_hint, fsync_dir, to_json, write_synced
from .checkpoint_models import (
    apply_model_state,
    check_optimizer_layout,
    module_device,
    prepare_model_load,
    save_model_folder,
    unwrap,
)

FORMAT_NAME = "ragen-checkpoint"
FORMAT_VERSION = 1
MANIFEST = "manifest.json"
TRAINER_STATE = "trainer_state.json"
OPTIM_FILE = "optim.pt"
RNG_FILE = "rng.pt"

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
                f"by ragen. {fix_hint(folder)}"
            )
        try:
            manifest = json.loads(manifest_path.read_text())
            files = manifest["files"]
            if manifest.get("format") != FORMAT_NAME:
                raise ValueError(f"format is {manifest.get('format')!r}")
        except (OSError, ValueError, KeyError, TypeError) as err:
            raise CheckpointError(
                f"checkpoint {folder}: cannot read {MANIFEST} ({err}). {fix_hint(folder)}"
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
            raise CheckpointError(f"checkpoint {folder} is corrupt: {shown}. {fix_hint(folder)}")
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
                    unwrap(model),
                    f"refusing to save checkpoint {final}: the {role}",
                    "the run diverged; lower the learning rate (model.actor_lr / "
                    "model.critic_lr) and resume from the previous checkpoint",
                )
        state = dict(trainer_state or {})
        state["step"] = step
        state_text = to_json(state, "trainer_state")
        config_text = None if config is None else to_json(_config_to_dict(config), "config")

        self.root.mkdir(parents=True, exist_ok=True)
        tmp = final.with_name(final.name + ".tmp")
        if tmp.exists():  # a previous attempt at this very step crashed; start clean
            shutil.rmtree(tmp)
        tmp.mkdir()

        try:
            with quiet_transformers():  # no "Writing model shards" bar per checkpoint
                actor_kind = save_model_folder(actor, tmp, "actor")
                if tokenizer is not None:
                    tokenizer.save_pretrained(str(tmp / "actor"))
                critic_kind = None if critic is None else save_model_folder(critic, tmp, "critic")
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
                "files": describe_files(tmp),  # hashing also fsyncs every file
            }
            write_synced(tmp / MANIFEST, json.dumps(manifest, indent=1, sort_keys=True))
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
        fsync_dir(self.root)
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
            fsync_dir(self.root)
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
                plan.append(prepare_model_load(unwrap(model), folder, role, manifest[role]))
        device = module_device(actor if actor is not None else critic)
        optim_state = self._torch_load(folder / OPTIM_FILE, device, trust_pickle)
        for kind, given in (("optimizers", optimizers), ("schedulers", schedulers)):
            missing = sorted(set(given) - set(optim_state[kind]))
            if missing:
                raise CheckpointError(
                    f"checkpoint {folder} has no state for {kind} {missing} (it has "
                    f"{sorted(optim_state[kind])}); pass the same names that were saved"
                )
        for name, opt in optimizers.items():
            check_optimizer_layout(
                opt, optim_state["optimizers"][name], f"{folder}: optimizer {name!r}"
            )
        rng_state = (
            self._torch_load(folder / RNG_FILE, "cpu", trust_pickle) if restore_rng else None
        )

        # Phase 2: apply.
        for model, state, is_adapter in plan:
            apply_model_state(model, state, is_adapter)
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
            raise CheckpointError(f"cannot read {file} ({err}). {fix_hint(file.parent)}") from None


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
