"""Resolve presets, YAML files and dotted overrides into a validated :class:`TrainConfig`.

Resolution order (later wins): the dataclasses' defaults, the ``model`` preset, the
``env`` preset, the ``algo`` preset, ``config=path.yaml`` files, then dotted overrides
``section.key=value`` (:func:`load_config`; ``ragen.trainer.config`` says more). A key
the config does not have, or a value of the wrong shape, is a one-line
:class:`~ragen.errors.ConfigError` naming the key and where it came from.
"""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import Any

import yaml
from omegaconf import DictConfig, ListConfig, OmegaConf
from omegaconf.errors import (
    ConfigAttributeError,
    ConfigKeyError,
    OmegaConfBaseException,
    ValidationError,
)

from ragen.cli_utils import nest_dotted, parse_value, split_key_value
from ragen.config_fields import fail, walk_fields
from ragen.errors import ConfigError

from .train_config import TrainConfig
from .validation import shown, validate

PRESET_DIR = Path(__file__).resolve().parent.parent.parent / "configs"


def preset_names(kind: str) -> list[str]:
    return sorted(p.stem for p in (PRESET_DIR / kind).glob("*.yaml"))


def _load_preset(kind: str, name: str) -> DictConfig:
    path = PRESET_DIR / kind / f"{name}.yaml"
    if not path.exists():
        close = difflib.get_close_matches(name, preset_names(kind), n=1)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        raise ConfigError(
            f"unknown {kind} preset {name!r}.{hint} Available: {', '.join(preset_names(kind))}."
        )
    return OmegaConf.load(path)


_SECTIONS = ("model", "env", "rollout", "algo", "trainer")


def _apply_preset(cfg: DictConfig, kind: str, name: str) -> DictConfig:
    """Merge a preset. A preset file either holds the keys of its own section, or
    (when its top-level keys are all section names) a fragment of the whole config,
    so that e.g. the ``tiny`` model preset can also shorten ``rollout.max_new_tokens``."""
    preset = _load_preset(kind, name)
    keys = set(preset.keys())
    fragment = preset if keys and keys <= set(_SECTIONS) else {kind: preset}
    return _merge(cfg, fragment, f"{kind}={name} ({PRESET_DIR / kind / name}.yaml)")


def _all_keys(node: Any, prefix: str = "") -> list[str]:
    if not isinstance(node, DictConfig):
        return [prefix[:-1]]
    keys = []
    for k in node.keys():
        child = node._get_node(k)
        if isinstance(child, DictConfig) and child._metadata.object_type is not dict:
            keys += _all_keys(child, f"{prefix}{k}.")
        else:
            keys.append(f"{prefix}{k}")
    return keys


#: keys that were documented once and are gone, with why: a config that still sets one
#: is told so (its default, null, is dropped quietly: that is what it always meant)
REMOVED_KEYS = {
    "model.tokenizer_path": "it was never read: the tokenizer is always the one of "
    "model.path (a hub id, a model folder, a .gguf file or tiny)",
}


def _drop_removed(other: Any, source: str) -> Any:
    """``other`` without the :data:`REMOVED_KEYS` set to null; one set to anything else
    is a :class:`ConfigError` saying why the key is gone."""
    node = other if isinstance(other, DictConfig) else OmegaConf.create(other)
    for key, why in REMOVED_KEYS.items():
        section, leaf = key.rsplit(".", 1)
        parent = OmegaConf.select(node, section, default=None)
        if not isinstance(parent, DictConfig) or leaf not in parent:
            continue
        if parent[leaf] is not None:
            fail(key, f"this key was removed ({why}); got {parent[leaf]!r} (from {source})",
                  f"delete {key}, and give the tokenizer's model as model.path")  # fmt: skip
        del parent[leaf]
    return node


def _check_shapes(base: DictConfig, other: Any, source: str, prefix: str = "") -> None:
    """A mapping where the config holds a list or a list where it holds a mapping, as a
    one-line :class:`ConfigError` naming the key (OmegaConf raises a bare ``TypeError``,
    "Cannot merge incompatible container types": ``trainer.rollback_change={}``)."""
    if not isinstance(other, (dict, DictConfig)):
        return
    for key, value in other.items():
        if key not in base:
            continue  # an unknown key: the merge names it
        node, full = base._get_node(key), f"{prefix}{key}"
        is_list = isinstance(value, (list, tuple, ListConfig))
        is_map = isinstance(value, (dict, DictConfig))
        if isinstance(node, ListConfig) and is_map:
            example = OmegaConf.to_container(node)[:2] or ["..."]
            fail(full, f"must be a list, got the mapping {shown(value)} (from {source})",
                  f"write a list, e.g. {full}=[{','.join(map(str, example))}]")  # fmt: skip
        if isinstance(node, DictConfig) and is_list:
            what = "a mapping of options, e.g. {dim_room: [8, 8]}" if node._metadata.object_type is dict else "a section"  # fmt: skip
            fail(full, f"must be {what}, got the list {shown(value)} (from {source})",
                  f"set its keys, e.g. {full}.KEY=VALUE")  # fmt: skip
        if isinstance(node, DictConfig) and is_map:
            _check_shapes(node, value, source, f"{full}.")


def _merge(base: DictConfig, other: Any, source: str) -> DictConfig:
    other = _drop_removed(other, source)
    _check_shapes(base, other, source)
    try:
        return OmegaConf.merge(base, other)
    except (ConfigAttributeError, ConfigKeyError) as err:
        key = str(getattr(err, "full_key", "") or "")
        close = difflib.get_close_matches(key, _all_keys(base), n=1)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        raise ConfigError(f"unknown config key {key!r} (from {source}).{hint}") from None
    except (ValidationError, OmegaConfBaseException) as err:
        key = str(getattr(err, "full_key", "") or "")
        msg = " ".join(str(getattr(err, "msg", err)).split())
        raise ConfigError(f"{key}: bad value (from {source}): {msg}") from None


def _load_file(path: str) -> DictConfig:
    """A ``config=FILE`` YAML file; a missing file, bad YAML or a file that is not a
    mapping of sections is a one-line :class:`ConfigError`."""
    if not Path(path).is_file():
        raise ConfigError(f"config: file {path!r} does not exist. Fix: check the path")
    try:
        node = OmegaConf.load(path)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
        problem = getattr(err, "problem", None) or type(err).__name__
        raise ConfigError(f"config: {path} is not valid YAML{where}: {problem}. Fix: correct "
                          "the file; `ragen train --print-config` prints a valid one") from None  # fmt: skip
    if not isinstance(node, DictConfig):
        raise ConfigError(f"config: {path} holds a {type(node).__name__}, not a mapping of "
                          "sections. Fix: write it as `algo: {gamma: 0.99}` (see "
                          "`ragen train --print-config`)")  # fmt: skip
    return node


def load_config(overrides: list[str] | None = None) -> TrainConfig:
    """Resolve presets + overrides into a validated :class:`TrainConfig` (see module
    docstring); raises :class:`~ragen.errors.ConfigError`."""
    cfg: DictConfig = OmegaConf.structured(TrainConfig)
    selections: dict[str, str] = {}
    files: list[str] = []
    dotted: dict[str, Any] = {}
    for item in overrides or []:
        key, value = split_key_value(
            item, "an override (e.g. trainer.total_steps=100 or algo=starpo-s)", ConfigError
        )
        if key in ("env", "algo", "model"):
            selections[key] = value
        elif key == "config":
            files.append(value)
        else:
            dotted[key] = parse_value(value)

    model = selections.get("model")
    if model is not None:
        if (PRESET_DIR / "model" / f"{model}.yaml").exists():
            cfg = _apply_preset(cfg, "model", model)
        else:
            cfg.model.path = model
    env = selections.get("env")
    if env is not None:
        if (PRESET_DIR / "env" / f"{env}.yaml").exists():
            cfg = _apply_preset(cfg, "env", env)
        else:
            cfg.env.name = env
    algo = selections.get("algo")
    if algo is not None:
        cfg = _apply_preset(cfg, "algo", algo)
    for path in files:
        cfg = _merge(cfg, _load_file(path), path)
    if dotted:
        cfg = _merge(cfg, nest_dotted(dotted), "command line")
    typed: TrainConfig = OmegaConf.to_object(cfg)  # type: ignore[assignment]
    validate(typed)
    return typed


def _as_node(cfg: TrainConfig | DictConfig) -> DictConfig:
    return cfg if isinstance(cfg, DictConfig) else OmegaConf.structured(cfg)


def to_yaml(cfg: TrainConfig | DictConfig) -> str:
    """The config as YAML (what ``--print-config`` prints and a run saves)."""
    return OmegaConf.to_yaml(_as_node(cfg))


def to_dict(cfg: TrainConfig | DictConfig) -> dict[str, Any]:
    """The config as plain nested dicts and lists (JSON-ready)."""
    return OmegaConf.to_container(_as_node(cfg), resolve=True)  # type: ignore[return-value]


def changed_keys(cfg: TrainConfig) -> dict[str, Any]:
    """``{"algo.name": "drgrpo", ...}``: the keys whose values differ from the defaults
    (``TrainConfig``'s), dotted, in field order: what a run's first console line says of
    its config (the whole of it is in the run folder's config.yaml)."""
    defaults = {key: value for key, _, value in walk_fields(TrainConfig)}
    return {
        key: value for key, _, value in walk_fields(cfg) if defaults.get(key, _MISSING) != value
    }


_MISSING = object()  # a key the defaults lack (never equal to a value)
