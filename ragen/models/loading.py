"""Devices, dtypes and loading: the one place every command loads a model.

    >>> model, tok = load_policy("tiny")                             # tiny[:SIZE], built offline
    >>> model, tok = load_policy("runs/tiny-small")                  # HF-format folder
    >>> model, tok = load_policy("~/.cache/ragen/models/smollm2.gguf")  # GGUF (dequantized)
    >>> model, tok = load_policy("Qwen/Qwen2.5-0.5B-Instruct")        # hub id (when online)

Defaults: CUDA when available else CPU (:func:`pick_device`); bf16 on a CUDA device that
supports it, float32 otherwise (:func:`pick_dtype`). The tokenizer always has a pad token
and pads on the left (batched generation appends on the right, so prompts must end
flush at the right edge).

What a name means is :mod:`ragen.models.names` (``tiny`` / ``tiny:SIZE``, a local
folder, a ``.gguf`` file, a model preset such as ``smollm2``, or a hub id); a GGUF file
is read once and cached as an HF folder (:mod:`ragen.models.gguf`). Every failure a user can cause is one line (:class:`~ragen.errors.ModelLoadError`,
:class:`~ragen.errors.ConfigError`) naming the problem and the fix.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from ragen.errors import ConfigError, ModelLoadError

from .gguf import resolve_cached
from .hf_setup import prepare_tokenizer, quiet_transformers, sync_special_ids
from .names import hub_offline
from .vlm import is_vision_config, load_vlm

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
DTYPE_CHOICES = ("auto", "float32", "bfloat16", "float16")  # model.dtype / --dtype


def check_device_spec(spec: Any, key: str = "device") -> None:
    """Raise :class:`~ragen.errors.ConfigError` naming ``key`` unless ``spec`` is ``auto``,
    None or a device torch knows (``cpu``, ``cuda``, ``cuda:N``, ...)."""
    pick_device(spec, key=key)


def pick_device(device: Any = None, key: str = "device"):
    """``device`` as a ``torch.device``; None or ``"auto"`` -> CUDA when available, else CPU.

    A malformed name, or CUDA asked for where there is none, raises
    :class:`~ragen.errors.ConfigError` naming ``key``.
    """
    import torch

    if device is None or device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        out = torch.device(device)
    except (RuntimeError, TypeError):
        raise ConfigError(
            f"{key}: invalid device {device!r}. Fix: use auto, cpu, cuda or cuda:N"
        ) from None
    if out.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError(
            f"{key}: {device!r} asked for, but CUDA is not available. Fix: use cpu or auto"
        )
    return out


def pick_dtype(device: Any = None, dtype: Any = None, *, training: bool = False):
    """``dtype`` as a ``torch.dtype``. None or ``"auto"``: float32 when ``training`` (the
    trainer keeps float32 weights and gets bf16 compute from autocast), else bf16 on a
    CUDA device with bf16 support and float32 otherwise.

    float32 on CPU because CPU bf16 matmuls are slow on most machines and lose precision
    the PPO ratio needs.
    """
    import torch

    if dtype is not None and dtype != "auto":
        if isinstance(dtype, torch.dtype):
            return dtype
        name = _DTYPE_NAMES.get(str(dtype).lower().removeprefix("torch."))
        if name is None:
            raise ConfigError(
                f"unknown dtype {dtype!r}. Fix: use one of {', '.join(DTYPE_CHOICES)} "
                "(or fp32/bf16/fp16)"
            )
        return getattr(torch, name)
    if training:
        return torch.float32
    device = pick_device(device)
    if device.type == "cuda" and torch.cuda.is_bf16_supported():
        return torch.bfloat16
    return torch.float32


def _hub_error(name: str, err: Exception, offline: bool) -> ModelLoadError:
    why = "offline mode is on (HF_HUB_OFFLINE)" if offline else f"the hub said: {err}"
    return ModelLoadError(
        f"model {name!r} is not a local path and could not be loaded from the Hugging Face hub "
        f"({why}); pass a local folder or .gguf file, or `ragen models create-tiny --out DIR`"
    )


def load_tokenizer(
    name_or_path: str | os.PathLike,
    gguf_file: str | None = None,
    trust_remote_code: bool = False,
    local_files_only: bool | None = None,
):
    """The tokenizer for a policy, with a pad token and ``padding_side="left"``."""

    source, gguf_file, is_local = resolve_cached(name_or_path, gguf_file, False, trust_remote_code)
    offline = hub_offline(local_files_only)
    kwargs: dict[str, Any] = {"trust_remote_code": trust_remote_code}
    if gguf_file:
        kwargs["gguf_file"] = gguf_file
    if not is_local:
        kwargs["local_files_only"] = offline
    try:
        with quiet_transformers(progress_bars=not is_local):
            tokenizer = _from_pretrained_tokenizer(source, is_local, gguf_file, kwargs)
    except OSError as err:
        if is_local:
            raise ModelLoadError(f"cannot load a tokenizer from {source}: {err}") from err
        raise _hub_error(source, err, offline) from err
    return prepare_tokenizer(tokenizer)


def _from_pretrained_tokenizer(source: str, is_local: bool, gguf_file, kwargs: dict):
    from transformers import AutoTokenizer

    if is_local and not gguf_file and _saved_as_plain_fast_tokenizer(source):
        # transformers 5 maps model_type "qwen2" to Qwen2Tokenizer, which rebuilds its
        # own pre-tokenizer and ignores the saved one; a folder saved as a plain fast
        # tokenizer (our tiny models, converted GGUFs) must load exactly as saved
        from transformers import PreTrainedTokenizerFast

        return PreTrainedTokenizerFast.from_pretrained(source, **kwargs)
    return AutoTokenizer.from_pretrained(source, **kwargs)


def _saved_as_plain_fast_tokenizer(folder: str) -> bool:
    config = Path(folder) / "tokenizer_config.json"
    if not (config.is_file() and (Path(folder) / "tokenizer.json").is_file()):
        return False
    try:
        cls = json.loads(config.read_text()).get("tokenizer_class")
    except (OSError, ValueError):
        return False
    return cls in ("TokenizersBackend", "PreTrainedTokenizerFast")


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
    ``TRANSFORMERS_OFFLINE`` environment flags. A vision-language model (a config with
    ``vision_config``: LLaVA, Qwen2-VL, SmolVLM, ...) comes back as ``(model,
    processor)`` (``ragen.models.vlm``).
    """
    from transformers import AutoModelForCausalLM

    device = pick_device(device)
    dtype = pick_dtype(device, dtype)
    source, gguf_file, is_local = resolve_cached(name_or_path, gguf_file, True, trust_remote_code)
    offline = hub_offline(local_files_only)
    if not gguf_file and _is_vision_source(source, is_local, offline, trust_remote_code):
        vlm, processor = load_vlm(
            source, device, dtype, trust_remote_code, None if is_local else offline
        )
        _check_loaded_weights(vlm, source)
        return vlm, processor
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
        with quiet_transformers(progress_bars=not is_local):
            model = AutoModelForCausalLM.from_pretrained(source, **kwargs)
    except OSError as err:
        if is_local:
            raise ModelLoadError(f"cannot load model weights from {source}: {err}") from err
        raise _hub_error(source, err, offline) from err
    model.to(device)
    model.eval()
    _check_loaded_weights(model, source)
    sync_special_ids(model, tokenizer)
    return model, tokenizer


def _check_loaded_weights(model: Any, source: str) -> None:
    """NaN/inf weights load and run, and give garbage that looks like a result: refuse
    them (``ragen.models.finite``)."""
    from .finite import check_finite_weights  # deferred: imports torch

    check_finite_weights(
        model,
        f"model {source}",
        "these weights diverged; load an earlier checkpoint (RUN/checkpoints/step_N/actor) "
        "or another model",
    )


def _is_vision_source(source: str, is_local: bool, offline: bool, trust_remote_code: bool) -> bool:
    """Whether ``source`` holds a vision-language model (its config has ``vision_config``)."""
    if is_local:
        try:
            config = json.loads((Path(source) / "config.json").read_text())
        except (OSError, ValueError):
            return False
        return isinstance(config, dict) and bool(config.get("vision_config"))
    from transformers import AutoConfig

    try:
        with quiet_transformers():
            config = AutoConfig.from_pretrained(
                source, local_files_only=offline, trust_remote_code=trust_remote_code
            )
    except (OSError, ValueError):
        return False  # the causal-LM path reports the problem in its own words
    return is_vision_config(config)


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
