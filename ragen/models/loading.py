"""Load a policy (causal LM + tokenizer) from a hub id, a local HF folder or a ``.gguf`` file.

    >>> model, tok = load_policy("runs/tiny-small")                  # HF-format folder
    >>> model, tok = load_policy("~/.cache/ragen/models/smollm2.gguf")  # GGUF (dequantized)
    >>> model, tok = load_policy("Qwen/Qwen2.5-0.5B-Instruct")        # hub id (when online)

Defaults: CUDA when available else CPU (:func:`pick_device`); bf16 on a CUDA device that
supports it, float32 otherwise (:func:`pick_dtype`). The tokenizer always has a pad token
and pads on the left (batched generation appends on the right, so prompts must end
flush at the right edge).

GGUF files are slow to read with transformers (the metadata and all 49k vocabulary
strings are parsed once for the config, once for the tokenizer and once for the
weights; ~20-30 s of CPU for SmolLM2-135M). The first load therefore saves the
dequantized model and its tokenizer in HF format under
``$RAGEN_CACHE/gguf/<name>-<key>/`` (default ``~/.cache/ragen``; the key hashes the
file's path, size and mtime) and later loads read that folder (~1 s). Set
``RAGEN_GGUF_CACHE=0`` to always read the GGUF directly.

Every failure a user can cause is one line naming the problem and the fix.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

_DTYPE_NAMES = {
    "float32": "float32",
    "fp32": "float32",
    "float": "float32",
    "bfloat16": "bfloat16",
    "bf16": "bfloat16",
    "float16": "float16",
    "fp16": "float16",
    "half": "float16",
}


def pick_device(device: Any = None):
    """``device`` as a ``torch.device``; None -> CUDA when available, else CPU."""
    import torch

    if device is not None:
        try:
            return torch.device(device)
        except (RuntimeError, TypeError) as err:
            raise ValueError(
                f"invalid device {device!r}; use e.g. 'cpu', 'cuda', 'cuda:0'"
            ) from err
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def pick_dtype(device: Any = None, dtype: Any = None):
    """``dtype`` as a ``torch.dtype``; None -> bf16 on CUDA with bf16 support, else float32.

    float32 on CPU because CPU bf16 matmuls are slow on most machines and lose precision
    the PPO ratio needs.
    """
    import torch

    if dtype is not None:
        if isinstance(dtype, torch.dtype):
            return dtype
        name = _DTYPE_NAMES.get(str(dtype).lower().removeprefix("torch."))
        if name is None:
            raise ValueError(
                f"unknown dtype {dtype!r}; use one of float32, bfloat16, float16 (or fp32/bf16/fp16)"
            )
        return getattr(torch, name)
    device = pick_device(device)
    if device.type == "cuda" and torch.cuda.is_bf16_supported():
        return torch.bfloat16
    return torch.float32


def _offline(local_files_only: bool | None) -> bool:
    if local_files_only is not None:
        return local_files_only
    flags = (os.environ.get("HF_HUB_OFFLINE", ""), os.environ.get("TRANSFORMERS_OFFLINE", ""))
    return any(f.strip().lower() in ("1", "true", "yes", "on") for f in flags)


def _looks_like_path(name: str) -> bool:
    """A string the user meant as a file system path (not a ``org/model`` hub id)."""
    return name.startswith(("/", "~", ".")) or name.endswith(".gguf") or name.count("/") > 1


def resolve_source(
    name_or_path: str | os.PathLike, gguf_file: str | None = None
) -> tuple[str, str | None, bool]:
    """Classify ``name_or_path`` -> ``(folder_or_hub_id, gguf_file_name, is_local)``.

    Raises the one-line errors for missing files, folders without ``config.json`` and a
    GGUF file without the ``gguf`` package.
    """
    name = os.fspath(name_or_path)
    if not name:
        raise ValueError("empty model name; pass a hub id, a model folder or a .gguf file")
    path = Path(name).expanduser()
    if name.endswith(".gguf"):
        if gguf_file is not None and gguf_file != path.name:
            raise ValueError(f"got both {name!r} and gguf_file={gguf_file!r}; pass only the path")
        if not path.is_file():
            raise FileNotFoundError(
                f"GGUF file {path} not found; check the path "
                "(`ragen models fetch-smollm2` downloads SmolLM2-135M-Instruct as GGUF)"
            )
        folder, gguf_file = str(path.parent), path.name
        _require_gguf_package(path)
        return folder, gguf_file, True
    if path.is_dir():
        if gguf_file is not None:
            if not (path / gguf_file).is_file():
                raise FileNotFoundError(f"GGUF file {path / gguf_file} not found; check gguf_file")
            _require_gguf_package(path / gguf_file)
            return str(path), gguf_file, True
        if not (path / "config.json").is_file():
            ggufs = sorted(p.name for p in path.glob("*.gguf"))
            hint = (
                f"it holds {ggufs[0]}: pass that file's path instead"
                if ggufs
                else "pass a folder saved with save_pretrained, or create one with "
                "`ragen models create-tiny --out DIR`"
            )
            raise FileNotFoundError(
                f"{path} has no config.json, so it is not a model folder; {hint}"
            )
        return str(path), None, True
    if path.exists():
        raise ValueError(f"{path} is a file but not a .gguf; pass its folder (with config.json)")
    if _looks_like_path(name):
        raise FileNotFoundError(
            f"model path {path} does not exist; check the path, or create a tiny model with "
            "`ragen models create-tiny --out DIR`"
        )
    return name, gguf_file, False  # a hub id


def _require_gguf_package(path: Path) -> None:
    try:
        import gguf  # noqa: F401
    except ImportError as err:
        raise RuntimeError(f"loading {path.name} needs the gguf package: pip install gguf") from err


def _hub_error(name: str, err: Exception, offline: bool) -> FileNotFoundError:
    why = "offline mode is on (HF_HUB_OFFLINE)" if offline else f"the hub said: {err}"
    return FileNotFoundError(
        f"model {name!r} is not a local path and could not be loaded from the Hugging Face hub "
        f"({why}); pass a local folder or .gguf file, or `ragen models create-tiny --out DIR`"
    )


def cache_root() -> Path:
    """Where ragen keeps downloads and conversions: ``$RAGEN_CACHE`` or ``~/.cache/ragen``."""
    return Path(os.environ.get("RAGEN_CACHE", "~/.cache/ragen")).expanduser()


def gguf_cache_dir(gguf_path: str | os.PathLike) -> Path:
    """The HF-format conversion folder for a GGUF file (exists only once converted)."""
    import hashlib

    path = Path(gguf_path).expanduser().resolve()
    st = path.stat()
    key = hashlib.blake2b(
        f"{path}|{st.st_size}|{st.st_mtime_ns}".encode(), digest_size=6
    ).hexdigest()
    return cache_root() / "gguf" / f"{path.stem}-{key}"


def _gguf_cache_enabled() -> bool:
    return os.environ.get("RAGEN_GGUF_CACHE", "1").strip().lower() not in (
        "0",
        "false",
        "no",
        "off",
    )


def convert_gguf(gguf_path: str | os.PathLike, trust_remote_code: bool = False) -> Path:
    """Dequantize a GGUF file into an HF folder (float32 weights + tokenizer), once.

    Returns the cached folder; writing goes to a temporary sibling that is renamed at
    the end, so an interrupted conversion never leaves a half-written cache.
    """
    import sys

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = Path(gguf_path).expanduser()
    _require_gguf_package(path)
    target = gguf_cache_dir(path)
    if (target / "config.json").is_file():
        return target
    print(f"converting {path.name} to HF format once (cached in {target})", file=sys.stderr)
    kwargs = {"gguf_file": path.name, "trust_remote_code": trust_remote_code}
    tokenizer = AutoTokenizer.from_pretrained(str(path.parent), **kwargs)
    model = AutoModelForCausalLM.from_pretrained(str(path.parent), dtype=torch.float32, **kwargs)
    _sync_special_ids(model, prepare_tokenizer(tokenizer))
    model = _without_quantizer(model)
    tmp = target.with_name(f"{target.name}.tmp-{os.getpid()}")
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    try:
        tmp.replace(target)
    except OSError:  # another process finished first
        import shutil

        shutil.rmtree(tmp, ignore_errors=True)
    return target


def _without_quantizer(model):
    """The same weights in a plain model: transformers refuses to save a "gguf-quantized"
    model although its weights are already dequantized tensors."""
    import copy

    import torch
    from transformers import AutoModelForCausalLM

    config = copy.deepcopy(model.config)
    for key in ("quantization_config", "_pre_quantization_dtype"):
        config.__dict__.pop(key, None)
    with torch.device("meta"):
        plain = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    missing, unexpected = plain.load_state_dict(model.state_dict(), strict=False, assign=True)
    if unexpected or [k for k in missing if k != "lm_head.weight"]:
        raise RuntimeError(f"GGUF conversion lost weights: {missing[:3]} {unexpected[:3]}")
    if "lm_head.weight" in missing:
        plain.tie_weights()
    plain.generation_config = model.generation_config
    return plain


def _cached_gguf_folder(folder: str, gguf_file: str, create: bool, trust_remote_code: bool):
    """The converted folder for ``folder/gguf_file`` when caching applies, else None."""
    if not _gguf_cache_enabled():
        return None
    path = Path(folder) / gguf_file
    cached = gguf_cache_dir(path)
    if (cached / "config.json").is_file():
        return cached
    if not create:
        return None
    try:
        return convert_gguf(path, trust_remote_code=trust_remote_code)
    except OSError as err:  # read-only or full disk: load the GGUF directly instead
        import warnings

        warnings.warn(
            f"could not cache the GGUF conversion ({err}); loading directly", stacklevel=3
        )
        return None


def load_tokenizer(
    name_or_path: str | os.PathLike,
    gguf_file: str | None = None,
    trust_remote_code: bool = False,
    local_files_only: bool | None = None,
):
    """The tokenizer for a policy, with a pad token and ``padding_side="left"``."""
    from transformers import AutoTokenizer

    source, gguf_file, is_local = _resolve_cached(name_or_path, gguf_file, False, trust_remote_code)
    offline = _offline(local_files_only)
    kwargs: dict[str, Any] = {"trust_remote_code": trust_remote_code}
    if gguf_file:
        kwargs["gguf_file"] = gguf_file
    if not is_local:
        kwargs["local_files_only"] = offline
    try:
        if is_local and not gguf_file and _saved_as_plain_fast_tokenizer(source):
            # transformers 5 maps model_type "qwen2" to Qwen2Tokenizer, which rebuilds its
            # own pre-tokenizer and ignores the saved one; a folder saved as a plain fast
            # tokenizer (our tiny models, converted GGUFs) must load exactly as saved
            from transformers import PreTrainedTokenizerFast

            tokenizer = PreTrainedTokenizerFast.from_pretrained(source, **kwargs)
        else:
            tokenizer = AutoTokenizer.from_pretrained(source, **kwargs)
    except OSError as err:
        if is_local:
            raise FileNotFoundError(f"cannot load a tokenizer from {source}: {err}") from err
        raise _hub_error(source, err, offline) from err
    return prepare_tokenizer(tokenizer)


def _resolve_cached(name_or_path, gguf_file, create: bool, trust_remote_code: bool):
    """``resolve_source``, then a GGUF file is swapped for its converted HF folder when
    one is cached (``create``: convert it now if not)."""
    source, gguf_file, is_local = resolve_source(name_or_path, gguf_file)
    if gguf_file:
        cached = _cached_gguf_folder(source, gguf_file, create, trust_remote_code)
        if cached is not None:
            source, gguf_file = str(cached), None
    return source, gguf_file, is_local


def _saved_as_plain_fast_tokenizer(folder: str) -> bool:
    config = Path(folder) / "tokenizer_config.json"
    if not (config.is_file() and (Path(folder) / "tokenizer.json").is_file()):
        return False
    try:
        cls = json.loads(config.read_text()).get("tokenizer_class")
    except (OSError, ValueError):
        return False
    return cls in ("TokenizersBackend", "PreTrainedTokenizerFast")


def prepare_tokenizer(tokenizer):
    """Give ``tokenizer`` a pad token (eos, else unk) and left padding; returns it."""
    if tokenizer.pad_token is None:
        fallback = tokenizer.eos_token or tokenizer.unk_token
        if fallback is None:
            raise ValueError(
                "the tokenizer has no pad, eos or unk token; set tokenizer.pad_token first"
            )
        tokenizer.pad_token = fallback
    tokenizer.padding_side = "left"
    return tokenizer


def load_policy(
    name_or_path: str | os.PathLike,
    device: Any = None,
    dtype: Any = None,
    gguf_file: str | None = None,
    trust_remote_code: bool = False,
    local_files_only: bool | None = None,
):
    """Load ``(model, tokenizer)``: a causal LM in eval mode on ``device`` and its tokenizer.

    ``name_or_path``: a hub id, a folder with ``config.json`` (``save_pretrained``
    output), or a ``.gguf`` file (dequantized to ``dtype`` by transformers; needs the
    ``gguf`` package). ``local_files_only`` defaults to the ``HF_HUB_OFFLINE`` /
    ``TRANSFORMERS_OFFLINE`` environment flags.
    """
    from transformers import AutoModelForCausalLM

    device = pick_device(device)
    dtype = pick_dtype(device, dtype)
    source, gguf_file, is_local = _resolve_cached(name_or_path, gguf_file, True, trust_remote_code)
    offline = _offline(local_files_only)
    tokenizer = load_tokenizer(
        source, gguf_file=gguf_file, trust_remote_code=trust_remote_code,
        local_files_only=local_files_only,
    )  # fmt: skip
    kwargs: dict[str, Any] = {"dtype": dtype, "trust_remote_code": trust_remote_code}
    if gguf_file:
        kwargs["gguf_file"] = gguf_file
    if not is_local:
        kwargs["local_files_only"] = offline
    try:
        model = AutoModelForCausalLM.from_pretrained(source, **kwargs)
    except OSError as err:
        if is_local:
            raise FileNotFoundError(f"cannot load model weights from {source}: {err}") from err
        raise _hub_error(source, err, offline) from err
    model.to(device)
    model.eval()
    _sync_special_ids(model, tokenizer)
    return model, tokenizer


def _sync_special_ids(model, tokenizer) -> None:
    """Make ``generation_config`` know the pad id and the tokenizer's eos (GGUF often lacks them)."""
    gen = getattr(model, "generation_config", None)
    if gen is None:
        return
    if gen.pad_token_id is None:
        gen.pad_token_id = tokenizer.pad_token_id
    eos = gen.eos_token_id
    eos_ids = [] if eos is None else [eos] if isinstance(eos, int) else list(eos)
    if tokenizer.eos_token_id is not None and tokenizer.eos_token_id not in eos_ids:
        eos_ids.insert(0, tokenizer.eos_token_id)
    if eos_ids:
        gen.eos_token_id = eos_ids if len(eos_ids) > 1 else eos_ids[0]


def count_parameters(model) -> int:
    """Number of distinct parameters (tied embeddings counted once)."""
    seen, total = set(), 0
    for p in model.parameters():
        if id(p) not in seen:
            seen.add(id(p))
            total += p.numel()
    return total


def chat_template_kind(tokenizer) -> str:
    """``chatml`` | ``llama3`` | ``other`` | ``none``: which family the chat template is."""
    template = getattr(tokenizer, "chat_template", None)
    if not template:
        return "none"
    if isinstance(template, dict):
        template = template.get("default") or next(iter(template.values()), "")
    if "<|im_start|>" in template:
        return "chatml"
    if "<|start_header_id|>" in template:
        return "llama3"
    return "other"
