"""Name -> environment factory, with presets and config validation.

    >>> import ragen.envs as envs
    >>> env = envs.make("sokoban", dim_room=(6, 6), num_boxes=1)
    >>> envs.names()
    ['bandit', ...]
    >>> envs.make("my_pkg.coin:CoinEnv")          # an env class by import path
    >>> envs.make("envs/coin.py:CoinEnv")         # ... or from a file

A preset is a registered name bound to a class and default keyword arguments
(``sokoban_large`` = ``SokobanEnv(dim_room=(8, 8), num_boxes=2)``). ``make`` rejects
unknown keyword arguments with a message listing the accepted ones.

Besides the registered names, every function here takes a **plug-in** env, so that a
user's env runs from the command line with no edit to ragen (``ragen train
env=my_pkg.coin:CoinEnv``):

* ``package.module:Class``: imported as is, and from the current folder when it is not
  importable otherwise (as ``uvicorn module:app`` does);
* ``path/to/file.py:Class``: the file loaded as a module;
* the name of an installed package's entry point in the group ``ragen.envs``
  (``[project.entry-points."ragen.envs"] coin = "my_pkg.coin:CoinEnv"``); these are
  listed by :func:`names` and ``ragen envs`` beside the built-in envs.

A plug-in must be a subclass of :class:`~ragen.envs.base.Env`; the commands run
``ragen.envs.checker.check_plugin`` on it before they use it.
"""

from __future__ import annotations

import difflib
import functools
import hashlib
import importlib
import importlib.metadata
import importlib.util
import inspect
import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ragen.errors import (
    ConfigError,
    EnvConfigError,
    EnvContractError,
    EnvOptionError,
    MissingFileError,
    RagenError,
    UnknownEnvError,
    check_choice,
)

from .base import Env

#: the entry-point group an installed package registers its envs in
ENTRY_POINT_GROUP = "ragen.envs"


@dataclass
class EnvSpec:
    name: str
    target: str  # "module:ClassName", imported lazily (gymnasium etc. stay optional)
    description: str
    defaults: dict[str, Any] = field(default_factory=dict)
    #: where a plug-in came from ("import path", "file", "entry point of DIST"); "" for
    #: the envs registered here
    plugin: str = ""

    def load_class(self) -> type[Env]:
        module, _, attr = self.target.partition(":")
        if module.endswith(".py"):  # a plug-in file, loaded once per process
            return _attribute(_module_from_file(module), attr, self.name)
        if self.plugin:
            return _attribute(_import_plugin_module(self.name, module), attr, self.name)
        return getattr(importlib.import_module(module), attr)


_REGISTRY: dict[str, EnvSpec] = {}
#: plug-in envs resolved in this process, by the name as written (``pkg.mod:Class``)
_PLUGINS: dict[str, EnvSpec] = {}


def register(name: str, target: str, description: str, **defaults: Any) -> None:
    """Register ``name`` -> ``target`` ("pkg.module:Class") with default kwargs."""
    if name in _REGISTRY:
        raise ValueError(f"environment {name!r} is already registered")
    _REGISTRY[name] = EnvSpec(name, target, description, dict(defaults))


def names() -> list[str]:
    """All registered environment names and installed plug-ins (entry points of the
    group ``ragen.envs``), sorted."""
    return sorted({*_REGISTRY, *_entry_points()})


def spec(name: str) -> EnvSpec:
    """The registration record of ``name``: a registered name, a plug-in
    (``package.module:Class``, ``path/to/file.py:Class`` or an installed entry point;
    see the module docstring). An unknown name raises
    :class:`~ragen.errors.UnknownEnvError` (a ``KeyError``) listing all; a plug-in that
    cannot be imported, or is not an :class:`Env`, a one-line user error naming the fix."""
    if not isinstance(name, str):
        raise UnknownEnvError(f"an environment name must be a string, got {name!r}")
    if name in _REGISTRY:
        return _REGISTRY[name]
    if name not in _PLUGINS:
        found = _plugin_spec(name)
        if found is None:
            every = names()
            close = difflib.get_close_matches(name, every, n=1)
            hint = f" Did you mean {close[0]!r}?" if close else ""
            raise UnknownEnvError(
                f"unknown environment {name!r}.{hint} Registered: {', '.join(every)}. "
                "Fix: one of these, or your own Env class as package.module:Class or "
                "path/to/file.py:Class (docs/ENVIRONMENTS.md)"
            )
        _PLUGINS[name] = found
    return _PLUGINS[name]


def is_plugin(name: str) -> bool:
    """Whether ``name`` is a plug-in env (an import path, a file or an entry point), not
    one registered by ragen itself."""
    return bool(spec(name).plugin)


def check_name(value: Any, key: str = "env.name") -> None:
    """Raise a one-line :class:`~ragen.errors.ConfigError` naming ``key`` unless
    ``value`` names an environment (registered, or a plug-in that imports)."""
    try:
        spec(value)
    except UnknownEnvError as err:
        if isinstance(value, str) and ":" not in value:  # a typo of a name: the close ones
            try:
                check_choice(key, value, names())
            except ConfigError as typo:
                raise ConfigError(
                    f"{typo}. Fix: one of these, or your own Env class as "
                    "package.module:Class, path/to/file.py:Class or a `ragen.envs` entry point"
                ) from None
        raise ConfigError(f"{key}: {err}") from None


def slug(name: str) -> str:
    """``name`` as a folder name: a plug-in's class name (``pkg.mod:CoinEnv`` ->
    ``CoinEnv``), a registered name as is."""
    if ":" in name:
        name = name.rpartition(":")[2]
    return re.sub(r"[^\w.-]+", "_", name).strip("._") or "env"


# -- plug-ins -------------------------------------------------------------------------------
@functools.cache
def _entry_points_of(path: tuple[str, ...]) -> dict[str, importlib.metadata.EntryPoint]:
    """The ``ragen.envs`` entry points installed on ``path`` (a snapshot of
    ``sys.path``: scanning the installed packages costs milliseconds, once per path)."""
    del path  # the cache key: entry_points() reads sys.path itself
    found = {}
    for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        found.setdefault(ep.name, ep)  # the first on the path wins, as imports do
    return found


def _entry_points() -> dict[str, importlib.metadata.EntryPoint]:
    return {k: v for k, v in _entry_points_of(tuple(sys.path)).items() if k not in _REGISTRY}


def _plugin_spec(name: str) -> EnvSpec | None:
    """The :class:`EnvSpec` of a plug-in ``name``, or None when it names none."""
    ep = _entry_points().get(name)
    if ep is not None:
        dist = getattr(ep.dist, "name", None) or "an installed package"
        target, where = ep.value.replace(" ", ""), f"entry point of {dist}"
    elif ":" in name:
        target, where = name, "import path"
        module = name.partition(":")[0]
        if module.endswith(".py") or "/" in module or os.sep in module:
            path = Path(module).expanduser()
            if not path.is_file():
                raise MissingFileError(
                    f"environment {name!r}: file {module} does not exist. Fix: give the "
                    "path of a Python file and a class in it, e.g. envs/coin.py:CoinEnv"
                )
            target, where = f"{path.resolve()}:{name.partition(':')[2]}", "file"
    else:
        return None
    module, _, attr = target.partition(":")
    if not module or not attr:
        raise UnknownEnvError(
            f"environment {name!r} names no class. Fix: package.module:Class or "
            "path/to/file.py:Class"
        )
    record = EnvSpec(name, target, "", plugin=where)
    cls = record.load_class()
    if not (isinstance(cls, type) and issubclass(cls, Env)):
        raise EnvContractError(
            f"environment {name!r}: {attr} is a {type(cls).__name__}, not a subclass of "
            "ragen.envs.Env. Fix: subclass ragen.envs.Env and implement _reset, _step, "
            "instructions and render (docs/ENVIRONMENTS.md, 'Your environment')"
        )
    doc = (cls.__doc__ or "").strip().splitlines()
    record.description = cls.description or (doc[0] if doc else "") or cls.__name__
    record.description += f" ({where}: {ep.value if ep is not None else name})"
    return record


def _attribute(module: Any, attr: str, name: str) -> Any:
    """``module.attr`` (dotted ``attr`` allowed), or a one-line error listing the
    :class:`Env` classes the module has."""
    value = module
    try:
        for part in attr.split("."):
            value = getattr(value, part)
    except AttributeError:
        classes = sorted(
            k
            for k, v in vars(module).items()
            if isinstance(v, type) and issubclass(v, Env) and v is not Env
        )
        where = getattr(module, "__file__", None) or module.__name__
        raise UnknownEnvError(
            f"environment {name!r}: {where} has no {attr!r}. Fix: "
            + (f"one of its Env classes: {', '.join(classes)}" if classes else "check the name")
        ) from None
    return value


def _import_error(name: str, module: str, err: BaseException) -> UnknownEnvError:
    """A one-line error for a plug-in module that does not import (RAGEN_DEBUG=1 shows
    the traceback of the exception chained to it)."""
    what = " ".join(f"{type(err).__name__}: {err}".split())
    return UnknownEnvError(
        f"environment {name!r}: cannot import {module} ({what}). Fix: correct the module, "
        "or install what it needs (RAGEN_DEBUG=1 shows the traceback)"
    )


def _import_plugin_module(name: str, module: str) -> Any:
    """Import ``module`` of a plug-in ``name``; a module that is not on ``sys.path`` is
    looked for in the current folder too (as ``python -m`` and ``uvicorn`` do, so
    ``ragen train env=my_env:MyEnv`` works from the folder holding ``my_env.py``)."""
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as err:
        top = module.split(".")[0]
        here = os.getcwd()
        if err.name != top or here in sys.path or "" in sys.path:
            if err.name in (top, module):
                raise UnknownEnvError(
                    f"environment {name!r}: no module named {err.name!r}. Fix: install the "
                    "package that holds it, run from the folder that holds it, or give a "
                    "file: path/to/file.py:Class"
                ) from None
            raise _import_error(name, module, err) from err
        sys.path.append(here)  # after every installed package: it shadows none
        return _import_plugin_module(name, module)
    except RagenError:
        raise
    except Exception as err:  # noqa: BLE001 - the user's module: any error is theirs
        raise _import_error(name, module, err) from err


@functools.cache
def _module_from_file(path: str) -> Any:
    """The Python file ``path`` (absolute) as a module, once per process. Its module
    name derives from the path, so two files named ``env.py`` stay apart and the same
    file gets the same name in every process (pickling its classes works)."""
    digest = hashlib.blake2b(path.encode(), digest_size=6).hexdigest()
    module_name = f"ragen_env_file_{Path(path).stem}_{digest}"
    if module_name in sys.modules:
        return sys.modules[module_name]
    found = importlib.util.spec_from_file_location(module_name, path)
    if found is None or found.loader is None:
        raise UnknownEnvError(f"{path} cannot be loaded as Python. Fix: give a .py file")
    module = importlib.util.module_from_spec(found)
    sys.modules[module_name] = module
    try:
        found.loader.exec_module(module)
    except Exception as err:  # noqa: BLE001 - the user's file: any error is theirs
        del sys.modules[module_name]
        raise _import_error(path, path, err) from err
    return module


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


# -- the built-in envs ------------------------------------------------------------------------
# Each a name, the class it builds (imported only when it is made, so optional libraries
# stay optional) and its preset; docs/ENVIRONMENTS.md describes them.
_BANDIT = "ragen.envs.games.bandit:BanditEnv"
_SOKOBAN = "ragen.envs.games.sokoban.env:SokobanEnv"
_LAKE = "ragen.envs.games.frozen_lake:FrozenLakeEnv"

register(
    "bandit", _BANDIT, "Two-armed bandit, train names Phoenix (safe) / Dragon (risky); single turn"
)
register(
    "bandit_test",
    _BANDIT,
    "Two-armed bandit with unseen (safe, risky) name pairs, one per seed; single turn",
    arm_pairs="test",
)
register(
    "bandit_reversed",
    _BANDIT,
    "Two-armed bandit with reversed semantics: Phoenix is the risky arm; single turn",
    reversed_semantics=True,
)
register("sokoban", _SOKOBAN, "Sokoban 6x6, 1 box; push every box onto a target")
register(
    "sokoban_large",
    _SOKOBAN,
    "Sokoban 8x8, 2 boxes",
    dim_room=(8, 8),
    num_boxes=2,
)
register(
    "sokoban_symbols",
    _SOKOBAN,
    "Sokoban 6x6, 1 box, drawn with a different symbol vocabulary (letters)",
    symbols="letters",
)
register("frozen_lake", _LAKE, "FrozenLake 4x4, random map, slippery (intended move p=0.8)")
register("frozen_lake_det", _LAKE, "FrozenLake 4x4, random map, deterministic (p=1)", p=1.0)
register(
    "sokoban_visual",
    "ragen.envs.games.visual_grids:VisualSokobanEnv",
    "Sokoban 6x6, 1 box, seen as an 84x84 picture (VAGEN; render('rgb'), 14 px cells)",
)
register(
    "frozen_lake_visual",
    "ragen.envs.games.visual_grids:VisualFrozenLakeEnv",
    "FrozenLake 4x4, slippery, seen as an 84x84 picture (VAGEN; render('rgb'), 21 px cells)",
)
register(
    "countdown",
    "ragen.envs.games.countdown:CountdownEnv",
    "Countdown: reach the target from 3-4 numbers with + - * / (single turn)",
)
register(
    "gym_frozen_lake",
    "ragen.envs.adapters.gymnasium_env:GymFrozenLakeEnv",
    "gymnasium FrozenLake-v1 (fixed 4x4 map, slippery) via the adapter",
)
register(
    "gym_taxi",
    "ragen.envs.adapters.gymnasium_env:GymTaxiEnv",
    "gymnasium Taxi via the adapter",
)

# -- procedural puzzles (solvers as oracles) ----------------------------------------------------
_SUDOKU = "ragen.envs.games.sudoku:SudokuEnv"
_2048 = "ragen.envs.games.game2048:Game2048Env"
_CUBE = "ragen.envs.games.cube2x2:Cube2x2Env"
register("sudoku", _SUDOKU, "Sudoku 4x4 (8 givens): fill rows, columns and 2x2 boxes with 1-4")
register("sudoku_9x9", _SUDOKU, "Sudoku 9x9 (36 givens): the classic puzzle", size=9)
register("game_2048", _2048, "2048 on 4x4: slide and merge tiles to reach 256")
register("game_2048_small", _2048, "2048 on 3x3: reach 64", size=3, win_tile=64)
register("cube2x2", _CUBE, "2x2 Rubik's cube scrambled by 3 turns; restore one colour per face")
register(
    "cube2x2_hard",
    _CUBE,
    "2x2 Rubik's cube scrambled by 11 turns (optimal solutions of 5-10 moves)",
    scramble_depth=11,
    max_steps=30,
)

# -- TextArena's single-player games (optional: ragen[textarena]) -------------------------------
_TEXTARENA = "ragen.envs.adapters.textarena_env:TextArenaEnv"
register(
    "textarena",
    _TEXTARENA,
    "Any single-player TextArena game by id (game=Wordle-v0); needs ragen[textarena]",
)
register(
    "ta_tower_of_hanoi",
    _TEXTARENA,
    "TextArena Tower of Hanoi, 3 disks, 14 moves; needs ragen[textarena]",
    game="TowerOfHanoi-v0",
)
register(
    "ta_guess_the_number",
    _TEXTARENA,
    "TextArena Guess the Number, 1-20 in 10 guesses; needs ragen[textarena]",
    game="GuessTheNumber-v0",
)
register(
    "ta_mastermind",
    _TEXTARENA,
    "TextArena Mastermind, 4 digits of 1-6 without repeats, 20 guesses; needs ragen[textarena]",
    game="Mastermind-v0",
)

# -- an environment served over HTTP (`ragen serve-env NAME`) -----------------------------------
register(
    "remote",
    "ragen.envs.serving.remote:RemoteEnv",
    "An environment served over HTTP by `ragen serve-env NAME` (url=http://HOST:PORT)",
)

# -- worlds users already have (optional extras; docs/ENVIRONMENTS.md) ---------------------------
register(
    "openenv",
    "ragen.envs.adapters.openenv_client:OpenEnvEnv",
    "Any OpenEnv environment server (url=http://HOST:PORT); needs ragen[openenv]",
)
_RG = "ragen.envs.adapters.reasoning_gym_env:ReasoningGymEnv"
register(
    "reasoning_gym",
    _RG,
    "reasoning-gym task generators by name (task=..., task_config=...); needs ragen[reasoning-gym]",
)
register(
    "rg_arithmetic",
    _RG,
    "reasoning-gym basic_arithmetic, 2-3 terms of 1-2 digits (single turn); ragen[reasoning-gym]",
    task="basic_arithmetic",
    task_config={"min_terms": 2, "max_terms": 3, "min_digits": 1, "max_digits": 2},
)
register(
    "rg_arithmetic_retry",
    _RG,
    "rg_arithmetic with 3 answers: retry after feedback (multi-turn); ragen[reasoning-gym]",
    task="basic_arithmetic",
    task_config={"min_terms": 2, "max_terms": 3, "min_digits": 1, "max_digits": 2},
    max_attempts=3,
)
register(
    "rg_puzzles",
    _RG,
    "reasoning-gym mix: mini_sudoku, knights_knaves, word_sorting (seed picks); "
    "ragen[reasoning-gym]",
    task=["mini_sudoku", "knights_knaves", "word_sorting"],
)
_TW = "ragen.envs.adapters.textworld_env:TextWorldEnv"
register(
    "textworld",
    _TW,
    "TextWorld text adventure per seed: 3 rooms, 3-command quest; needs ragen[textworld]",
)
register(
    "textworld_hard",
    _TW,
    "TextWorld: 6 rooms, 10 objects, 6-command quest, brief objective; needs ragen[textworld]",
    nb_rooms=6,
    nb_objects=10,
    quest_length=6,
    objective="brief",
    max_steps=80,
)
_DUEL = "ragen.envs.adapters.textarena_two_player:TwoPlayerTextArenaEnv"
register(
    "ta_tictactoe",
    _DUEL,
    "TextArena Tic Tac Toe vs a scripted opponent, either side; needs ragen[textarena]",
    game="TicTacToe-v0",
)
register(
    "ta_connect_four",
    _DUEL,
    "TextArena Connect Four vs a scripted opponent, either side; needs ragen[textarena]",
    game="ConnectFour-v0",
)
register(
    "ta_nim",
    _DUEL,
    "TextArena Nim (piles 3 4 5) vs a scripted opponent, either side; needs ragen[textarena]",
    game="Nim-v0",
)
