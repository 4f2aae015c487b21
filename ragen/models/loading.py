"""Model names, devices, dtypes and loading: the one place every command resolves a model.

    >>> model, tok = load_policy("tiny")                             # tiny[:SIZE], built offline
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

Names (:func:`resolve_model`): ``tiny`` / ``tiny:SIZE``, a local folder, a ``.gguf``
file, a model preset (``smollm2``) or a hub id; an unknown name fails at once offline.
Every failure a user can cause is one line (:class:`~ragen.errors.ModelLoadError`,
:class:`~ragen.errors.ConfigError`) naming the problem and the fix.
"""

from __future__ import annotations

import copy
import difflib
import hashlib
import json
import os
import shutil
import socket
import struct
import sys
import warnings
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from ragen.checkpoint_verify import verify_model_folder
from ragen.errors import ConfigError, ModelLoadError

from .hf_setup import prepare_tokenizer, quiet_transformers
from .tiny import DEFAULT_SIZE, PRESETS, create_tiny
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
TINY = "tiny"  # ``tiny`` / ``tiny:SIZE``: a tiny model built offline on first use


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


def cache_root() -> Path:
    """Where ragen keeps tiny models, downloads and conversions: ``$RAGEN_CACHE`` or
    ``~/.cache/ragen``."""
    return Path(os.environ.get("RAGEN_CACHE", "~/.cache/ragen")).expanduser()


def model_presets() -> dict[str, str]:
    """``ragen/configs/model/<name>.yaml`` -> the ``model.path`` it names."""
    import yaml

    folder = Path(__file__).resolve().parent.parent / "configs" / "model"
    out = {}
    for file in sorted(folder.glob("*.yaml")):
        data = yaml.safe_load(file.read_text()) or {}
        path = (data.get("model") or {}).get("path", data.get("path"))
        if path:
            out[file.stem] = str(path)
    return out


def resolve_model(name: str | os.PathLike, seed: int = 0) -> str:
    """The one model-name resolver of every command (train, eval, sft, demo, benches).

    * ``tiny`` / ``tiny:SIZE`` -> a tiny model folder under ``cache_root()/models``,
      built offline on first use (sizes: ``ragen.models.tiny.PRESETS``; ``tiny`` alone
      is ``tiny:micro``, ``ragen.models.tiny.DEFAULT_SIZE``);
    * an existing path (``~`` expanded) -> that path; ``.gguf`` files included;
    * a model preset name (``ragen/configs/model``, e.g. ``smollm2``) -> its path, resolved;
    * anything else is a hub id: returned as is when it is in the Hugging Face cache or
      the hub is reachable; otherwise (offline) :class:`~ragen.errors.ModelLoadError`
      at once, with a "did you mean" for names close to ``tiny`` or a preset.

    Paths that do not exist are returned as is: loading them raises the precise error.
    """
    text = os.fspath(name)
    if text == TINY or text.startswith(TINY + ":"):
        return str(_tiny_model(text.partition(":")[2] or DEFAULT_SIZE, seed))
    path = Path(text).expanduser()
    if path.exists() or _looks_like_path(text) or not text:
        return str(path) if text else text
    presets = model_presets()
    if text in presets:
        return resolve_model(presets[text], seed)
    return _check_hub_id(text, presets)


def _tiny_model(size: str, seed: int) -> Path:

    if size not in PRESETS:
        close = difflib.get_close_matches(size, PRESETS, n=1)
        hint = f" Did you mean 'tiny:{close[0]}'?" if close else ""
        raise ModelLoadError(
            f"unknown tiny model size {size!r}.{hint} Valid: "
            + ", ".join(f"tiny:{s}" for s in PRESETS)
        )
    out = cache_root() / "models" / f"tiny-{size}-seed{seed}"
    if not (out / "config.json").exists():
        create_tiny(out, size=size, seed=seed)
    return out


def _check_hub_id(name: str, presets: dict[str, str]) -> str:
    """``name`` if it can be a usable hub id here (cached, or the hub is reachable)."""

    candidates = list(dict.fromkeys([TINY, *(f"{TINY}:{s}" for s in PRESETS), *presets]))
    close = difflib.get_close_matches(name, candidates, n=1, cutoff=0.6)
    hint = f" Did you mean {close[0]!r}?" if close else ""
    if _in_hub_cache(name):
        return name
    if "/" not in name and close:  # a typo of one of ours, not a hub id
        raise ModelLoadError(
            f"unknown model {name!r}.{hint} Valid: a folder, a .gguf file, a hub id, "
            f"{', '.join(candidates)}"
        )
    if _offline(None) or not _hub_reachable():
        raise ModelLoadError(
            f"model {name!r} is not a local path, a tiny model or a preset "
            f"({', '.join(candidates)}), and not in the Hugging Face cache; the hub is "
            f"unreachable (offline).{hint} Fix: pass a local folder or .gguf file, or "
            "create one with `ragen models create-tiny --out DIR`"
        )
    return name


def _in_hub_cache(repo_id: str) -> bool:
    try:
        from huggingface_hub import try_to_load_from_cache

        found = try_to_load_from_cache(repo_id, "config.json")
    except Exception:  # an invalid repo id, or no huggingface_hub: not cached
        return False
    return isinstance(found, str)


def _hub_reachable(timeout_s: float = 2.0) -> bool:
    """Whether a TCP connection to the hub (``$HF_ENDPOINT``) opens within ``timeout_s``:
    an offline machine learns so at once instead of after the hub client's retries."""
    url = urlparse(os.environ.get("HF_ENDPOINT", "https://huggingface.co"))
    port = url.port or (80 if url.scheme == "http" else 443)
    try:
        socket.create_connection((url.hostname or "huggingface.co", port), timeout_s).close()
    except OSError:
        return False
    return True


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

    ``name_or_path`` goes through :func:`resolve_model` first (``tiny``, presets, hub
    ids). Raises the one-line :class:`~ragen.errors.ModelLoadError` for missing files,
    folders without ``config.json`` and a GGUF file without the ``gguf`` package.
    """
    name = os.fspath(name_or_path)
    if gguf_file is None:
        name = resolve_model(name)
    if not name:
        raise ModelLoadError("empty model name; pass a hub id, a model folder or a .gguf file")
    path = Path(name).expanduser()
    if name.endswith(".gguf"):
        if gguf_file is not None and gguf_file != path.name:
            raise ModelLoadError(
                f"got both {name!r} and gguf_file={gguf_file!r}; pass only the path"
            )
        if not path.is_file():
            raise ModelLoadError(
                f"GGUF file {path} not found; check the path "
                "(`ragen models fetch-smollm2` downloads SmolLM2-135M-Instruct as GGUF)"
            )
        folder, gguf_file = str(path.parent), path.name
        _require_gguf_package(path)
        return folder, gguf_file, True
    if path.is_dir():
        if gguf_file is not None:
            if not (path / gguf_file).is_file():
                raise ModelLoadError(f"GGUF file {path / gguf_file} not found; check gguf_file")
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
            raise ModelLoadError(f"{path} has no config.json, so it is not a model folder; {hint}")
        # a checkpoint's model is checked against its manifest, any folder's safetensors
        # against their headers: corrupt weights must not load silently or as a traceback

        verify_model_folder(path)
        return str(path), None, True
    if path.exists():
        raise ModelLoadError(
            f"{path} is a file but not a .gguf; pass its folder (with config.json)"
        )
    if _looks_like_path(name):
        raise ModelLoadError(
            f"model path {path} does not exist; check the path, or create a tiny model with "
            "`ragen models create-tiny --out DIR`"
        )
    return name, gguf_file, False  # a hub id


_GGUF_HEADER = 24  # magic (4) + version (4) + tensor count (8) + key/value count (8)
_GGUF_MIN_KV, _GGUF_MIN_TENSOR = 13, 28  # the fewest bytes one entry of each can take


def check_gguf(path: str | os.PathLike) -> None:
    """Raise one-line :class:`~ragen.errors.ModelLoadError` naming ``path`` unless it is a
    complete GGUF file: the magic, counts that fit in the file, metadata and tensor table
    that parse, and every tensor's bytes inside the file (a half-downloaded file fails
    here, not with a numpy or ``struct`` traceback deep inside transformers)."""
    path = Path(path).expanduser()
    why = _gguf_header_problem(path)
    if why is None:
        why = _gguf_body_problem(path)
    if why is not None:
        raise ModelLoadError(
            f"GGUF file {path} is damaged ({why}); download it again (SmolLM2: "
            "`ragen models fetch-smollm2`) or pass another model"
        )


def _gguf_header_problem(path: Path) -> str | None:
    """What is wrong with the fixed 24-byte header, or None; reads only the header."""
    size = path.stat().st_size
    with open(path, "rb") as f:
        head = f.read(_GGUF_HEADER)
    if head[:4] != b"GGUF":
        return "it does not start with the GGUF magic bytes" if head else "it is empty"
    if len(head) < _GGUF_HEADER:
        return f"truncated: {size} bytes, shorter than the {_GGUF_HEADER}-byte header"
    n_tensors, n_kv = struct.unpack("<QQ", head[8:24])
    if n_kv * _GGUF_MIN_KV + n_tensors * _GGUF_MIN_TENSOR > size - _GGUF_HEADER:
        return f"its header claims {n_tensors} tensors and {n_kv} keys, more than {size} bytes hold"
    return None


def _gguf_body_problem(path: Path) -> str | None:
    """What is wrong with the metadata, tensor table or tensor data, or None."""
    from gguf import GGUFReader

    try:
        reader = GGUFReader(str(path))
    except Exception as err:  # any parse failure of a damaged file: numpy, struct, unicode
        return f"{type(err).__name__}: {err}"
    size = path.stat().st_size
    for tensor in reader.tensors:
        end = int(tensor.data_offset) + int(tensor.n_bytes)
        if end > size:
            return f"truncated: tensor {tensor.name} ends at byte {end}, the file has {size}"
    return None


def _require_gguf_package(path: Path) -> None:
    try:
        import gguf  # noqa: F401
    except ImportError as err:
        raise ModelLoadError(
            f"loading {path.name} needs the gguf package: pip install gguf"
        ) from err


def _hub_error(name: str, err: Exception, offline: bool) -> ModelLoadError:
    why = "offline mode is on (HF_HUB_OFFLINE)" if offline else f"the hub said: {err}"
    return ModelLoadError(
        f"model {name!r} is not a local path and could not be loaded from the Hugging Face hub "
        f"({why}); pass a local folder or .gguf file, or `ragen models create-tiny --out DIR`"
    )


def gguf_cache_dir(gguf_path: str | os.PathLike) -> Path:
    """The HF-format conversion folder for a GGUF file (exists only once converted)."""
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
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = Path(gguf_path).expanduser()
    _require_gguf_package(path)
    target = gguf_cache_dir(path)
    if (target / "config.json").is_file():
        return target
    check_gguf(path)
    print(f"converting {path.name} to HF format once (cached in {target})", file=sys.stderr)
    kwargs = {"gguf_file": path.name, "trust_remote_code": trust_remote_code}
    with quiet_transformers():
        tokenizer = AutoTokenizer.from_pretrained(str(path.parent), **kwargs)
        model = AutoModelForCausalLM.from_pretrained(
            str(path.parent), dtype=torch.float32, **kwargs
        )
        _sync_special_ids(model, prepare_tokenizer(tokenizer))
        model = _without_quantizer(model)
        tmp = target.with_name(f"{target.name}.tmp-{os.getpid()}")
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
    try:
        tmp.replace(target)
    except OSError:  # another process finished first
        shutil.rmtree(tmp, ignore_errors=True)
    return target


def _without_quantizer(model):
    """The same weights in a plain model: transformers refuses to save a "gguf-quantized"
    model although its weights are already dequantized tensors."""
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
    except ModelLoadError:  # a damaged file: no fallback helps
        raise
    except OSError as err:  # read-only or full disk: load the GGUF directly instead
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

    source, gguf_file, is_local = _resolve_cached(name_or_path, gguf_file, False, trust_remote_code)
    offline = _offline(local_files_only)
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


def _resolve_cached(name_or_path, gguf_file, create: bool, trust_remote_code: bool):
    """``resolve_source``, then a GGUF file is swapped for its converted HF folder when
    one is cached (``create``: convert it now if not)."""
    source, gguf_file, is_local = resolve_source(name_or_path, gguf_file)
    if gguf_file:
        cached = _cached_gguf_folder(source, gguf_file, create, trust_remote_code)
        if cached is not None:
            source, gguf_file = str(cached), None
        else:  # transformers reads the file itself: it must be whole
            check_gguf(Path(source) / gguf_file)
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
    source, gguf_file, is_local = _resolve_cached(name_or_path, gguf_file, True, trust_remote_code)
    offline = _offline(local_files_only)
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
    _sync_special_ids(model, tokenizer)
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
