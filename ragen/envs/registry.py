"""Name -> environment factory, with presets and config validation.

    >>> import ragen.envs as envs
    >>> env = envs.make("sokoban", dim_room=(6, 6), num_boxes=1)
    >>> envs.names()
    ['bandit', ...]

A preset is a registered name bound to a class and default keyword arguments
(``sokoban_large`` = ``SokobanEnv(dim_room=(8, 8), num_boxes=2)``). ``make`` rejects
unknown keyword arguments with a message listing the accepted ones.
"""

from __future__ import annotations

import difflib
import importlib
import inspect
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ragen.errors import (
    ConfigError,
    EnvConfigError,
    EnvOptionError,
    MissingFileError,
    UnknownEnvError,
)

from .base import Env


@dataclass
class EnvSpec:
    name: str
    target: str  # "module:ClassName", imported lazily (gymnasium etc. stay optional)
    description: str
    defaults: dict[str, Any] = field(default_factory=dict)

    def load_class(self) -> type[Env]:
        module, _, cls = self.target.partition(":")
        return getattr(importlib.import_module(module), cls)


_REGISTRY: dict[str, EnvSpec] = {}


def register(name: str, target: str, description: str, **defaults: Any) -> None:
    """Register ``name`` -> ``target`` ("pkg.module:Class") with default kwargs."""
    if name in _REGISTRY:
        raise ValueError(f"environment {name!r} is already registered")
    _REGISTRY[name] = EnvSpec(name, target, description, dict(defaults))


def names() -> list[str]:
    """All registered environment names, sorted."""
    return sorted(_REGISTRY)


def spec(name: str) -> EnvSpec:
    """The registration record of ``name``; an unknown name raises
    :class:`~ragen.errors.UnknownEnvError` (a ``KeyError``) listing all."""
    if name not in _REGISTRY:
        close = difflib.get_close_matches(name, _REGISTRY, n=1)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        raise UnknownEnvError(
            f"unknown environment {name!r}.{hint} Registered: {', '.join(names())}."
        )
    return _REGISTRY[name]


def make(name: str, **config: Any) -> Env:
    """Build environment ``name`` with its preset defaults overridden by ``config``."""
    s = spec(name)
    cls = s.load_class()
    kwargs = {**s.defaults, **config}
    params = inspect.signature(cls.__init__).parameters
    accepts_var = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    if not accepts_var:
        allowed = [k for k in params if k != "self"]
        unknown = sorted(set(kwargs) - set(allowed))
        if unknown:
            raise EnvConfigError(
                f"environment {name!r} got unknown config key(s) {unknown}; "
                f"accepted keys: {', '.join(allowed)}"
            )
    try:
        env = cls(**kwargs)
    except EnvOptionError as err:  # name the env: the option alone may be ambiguous
        raise EnvOptionError(f"environment {name!r}: {err}") from None
    env.name = name
    return env


def config_keys(name: str) -> dict[str, Any]:
    """The config keys ``name`` accepts with their effective defaults (preset over class)."""
    s = spec(name)
    params = inspect.signature(s.load_class().__init__).parameters
    keys = {
        k: p.default
        for k, p in params.items()
        if k != "self" and p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)
    }
    keys.update(s.defaults)
    return keys


def check_options(name: str, options: dict[str, Any], key: str = "env.config") -> None:
    """Raise :class:`~ragen.errors.ConfigError` (naming ``<key>.<option>``) unless
    environment ``name`` accepts every option in ``options``, before anything is built; an
    unknown ``name`` raises :class:`~ragen.errors.UnknownEnvError`. An env whose
    constructor takes ``**kwargs`` accepts anything."""
    params = inspect.signature(spec(name).load_class().__init__).parameters
    if any(p.kind is p.VAR_KEYWORD for p in params.values()):
        return
    accepted = list(config_keys(name))
    for option in options:
        if option not in accepted:
            close = difflib.get_close_matches(str(option), accepted, n=1)
            hint = f" Did you mean {close[0]!r}?" if close else ""
            raise ConfigError(
                f"{key}.{option}: environment {name!r} has no option {option!r}.{hint} "
                f"Valid: {', '.join(accepted)}"
            )


def make_from_config(config: dict[str, Any] | str | Path) -> Env:
    """Build from ``{"name": ..., **kwargs}`` or a YAML file holding such a mapping."""
    if isinstance(config, (str, Path)):
        import yaml

        path = Path(config)
        if not path.exists():
            raise MissingFileError(f"environment config {path} does not exist. Fix: check the path")
        config = yaml.safe_load(path.read_text()) or {}
    config = dict(config)
    if "name" not in config:
        raise KeyError("environment config needs a 'name' key, e.g. name: sokoban")
    name = config.pop("name")
    return make(name, **config)
