"""GGUF files: checked whole before anything reads them, converted once to an HF folder.

GGUF files are slow to read with transformers (the metadata and all 49k vocabulary
strings are parsed once for the config, once for the tokenizer and once for the
weights; ~20-30 s of CPU for SmolLM2-135M). The first load therefore saves the
dequantized model and its tokenizer in HF format under
``$RAGEN_CACHE/gguf/<name>-<key>/`` (default ``~/.cache/ragen``; the key hashes the
file's path, size and mtime) and later loads read that folder (~1 s). Set
``RAGEN_GGUF_CACHE=0`` to always read the GGUF directly; transformers then reads the
file itself, after :func:`check_gguf` found it whole.
"""

from __future__ import annotations

import copy
import hashlib
import os
import shutil
import struct
import sys
import warnings
from pathlib import Path

from ragen.errors import ModelLoadError

from .hf_setup import prepare_tokenizer, quiet_transformers, sync_special_ids
from .names import cache_root, require_gguf_package, resolve_source

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


def gguf_cache_dir(gguf_path: str | os.PathLike) -> Path:
    """The HF-format conversion folder for a GGUF file (exists only once converted)."""
    path = Path(gguf_path).expanduser().resolve()
    st = path.stat()
    key = hashlib.blake2b(
        f"{path}|{st.st_size}|{st.st_mtime_ns}".encode(), digest_size=6
    ).hexdigest()
    return cache_root() / "gguf" / f"{path.stem}-{key}"


def gguf_cache_enabled() -> bool:
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
    require_gguf_package(path)
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
        sync_special_ids(model, prepare_tokenizer(tokenizer))
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


def cached_gguf_folder(folder: str, gguf_file: str, create: bool, trust_remote_code: bool):
    """The converted folder for ``folder/gguf_file`` when caching applies, else None."""
    if not gguf_cache_enabled():
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


def resolve_cached(name_or_path, gguf_file, create: bool, trust_remote_code: bool):
    """``resolve_source``, then a GGUF file is swapped for its converted HF folder when
    one is cached (``create``: convert it now if not)."""
    source, gguf_file, is_local = resolve_source(name_or_path, gguf_file)
    if gguf_file:
        cached = cached_gguf_folder(source, gguf_file, create, trust_remote_code)
        if cached is not None:
            source, gguf_file = str(cached), None
        else:  # transformers reads the file itself: it must be whole
            check_gguf(Path(source) / gguf_file)
    return source, gguf_file, is_local
