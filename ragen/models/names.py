"""What a model name means: ``tiny[:SIZE]``, a folder, a ``.gguf`` file, a preset or a
hub id, resolved once for every command (:func:`resolve_model`) and classified for
loading (:func:`resolve_source`).

An unknown name fails at once offline, with a "did you mean" for names close to
``tiny`` or a preset; every failure a user can cause is one line
(:class:`~ragen.errors.ModelLoadError`) naming the problem and the fix.
"""

from __future__ import annotations

import difflib
import os
import socket
from pathlib import Path
from urllib.parse import urlparse

import yaml

from ragen.checkpoint_verify import verify_model_folder
from ragen.errors import ModelLoadError

from .tiny import DEFAULT_SIZE, PRESETS, create_tiny

TINY = "tiny"  # ``tiny`` / ``tiny:SIZE``: a tiny model built offline on first use


def cache_root() -> Path:
    """Where ragen keeps tiny models, downloads and conversions: ``$RAGEN_CACHE`` or
    ``~/.cache/ragen``."""
    return Path(os.environ.get("RAGEN_CACHE", "~/.cache/ragen")).expanduser()


def model_presets() -> dict[str, str]:
    """``ragen/configs/model/<name>.yaml`` -> the ``model.path`` it names."""
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
    if hub_offline(None) or not _hub_reachable():
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


def hub_offline(local_files_only: bool | None) -> bool:
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
        require_gguf_package(path)
        return folder, gguf_file, True
    if path.is_dir():
        if gguf_file is not None:
            if not (path / gguf_file).is_file():
                raise ModelLoadError(f"GGUF file {path / gguf_file} not found; check gguf_file")
            require_gguf_package(path / gguf_file)
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


def require_gguf_package(path: Path) -> None:
    try:
        import gguf  # noqa: F401
    except ImportError as err:
        raise ModelLoadError(
            f"loading {path.name} needs the gguf package: pip install gguf"
        ) from err
