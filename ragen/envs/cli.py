"""``ragen envs`` (list environments), ``ragen play`` (play one in the terminal) and
``ragen serve-env`` (serve one over HTTP, :mod:`ragen.envs.serving.http_server`).

    ragen envs                      # names and one-line descriptions
    ragen envs --keys               # ... with every config key and its default
    ragen envs reasoning_gym        # one env in full: options, turn budget, its tasks
    ragen envs --summary            # oracle vs random policy on every env
    ragen play sokoban --seed 3     # you play: type actions, 'q' (or quit/exit) to stop
    ragen play frozen_lake --solver --set p=1/3 --set size=5
    ragen play sokoban --set levels=handmade --seed 1
    ragen serve-env sokoban --port 8765   # serve it over HTTP (train with env=remote)
    ragen serve-env sokoban --protocol openenv --port 8000   # ... to OpenEnv clients (TRL)

Every command takes a user's own env too: ``package.module:Class``,
``path/to/file.py:Class`` or an installed ``ragen.envs`` entry point, checked with
:func:`ragen.envs.checker.check_plugin` before it is played or served.

Also :func:`solver_summary` (oracle vs random reference policies per env), used by
the demo.
"""

from __future__ import annotations

import argparse
import random
import sys
import textwrap
from pathlib import Path
from typing import Any, TextIO

import yaml

from ragen.cli_utils import parse_key_values
from ragen.errors import EnvConfigError, MissingDependencyError, RagenError

from .adapters.reasoning_gym_env import ReasoningGymEnv, task_names
from .adapters.textarena_env import TextArenaEnv, import_textarena
from .base import derive_seed
from .checker import check_plugin
from .registry import config_keys, make, names, spec
from .serving.http_server import serve
from .serving.openenv_server import serve_openenv

_QUIT_WORDS = {"q", "quit", "exit"}


def _port(text: str) -> int:
    """``--port``: a TCP port number, 0-65535 (0: any free port)."""
    try:
        port = int(text)
    except ValueError:
        port = -1
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not a TCP port (0-65535; 0: any free one)")
    return port


#: what ``ragen env=NAME`` can be besides a registered name (the help of every command)
ENV_HELP = (
    "registered environment name (see `ragen envs`), or your own Env class: "
    "package.module:Class, path/to/file.py:Class or an installed `ragen.envs` entry point"
)
#: the env presets of ``ragen train env=NAME`` (their turn budgets; ragen eval's too)
_ENV_PRESETS = Path(__file__).resolve().parent.parent / "configs" / "env"


def add_parser(subparsers: Any) -> None:
    envs_parser = subparsers.add_parser(
        "envs",
        help="list the registered environments (NAME: one in full)",
        description="List the environments (registered and installed plug-ins); with NAME, "
        "show one in full: its options and defaults, its turn budget, and what it loads "
        "by name (reasoning_gym: reasoning-gym's tasks; textarena: TextArena's games).",
    )
    envs_parser.add_argument("names", nargs="*", metavar="NAME", help="show these envs in full")
    envs_parser.add_argument(
        "--keys", action="store_true", help="also list config keys and defaults"
    )
    envs_parser.add_argument(
        "--summary", action="store_true", help="run the oracle and random policies on every env"
    )
    envs_parser.add_argument(
        "--episodes", type=int, default=20, help="episodes per policy (--summary)"
    )
    envs_parser.set_defaults(func=cmd_envs)

    play = subparsers.add_parser(
        "play",
        help="play an environment in the terminal (or watch its solver)",
        description="Play ENV: type an action per prompt; q, quit, exit or end of input stops.",
    )
    play.add_argument("env", help=ENV_HELP)
    play.add_argument("--seed", type=int, default=0, help="initial-state seed")
    play.add_argument("--solver", action="store_true", help="watch the built-in solver play")
    play.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="config override (YAML value), e.g. --set dim_room=[8,8] --set p=1.0",
    )
    play.add_argument("--max-steps", type=int, default=500, help="safety cap on valid steps")
    play.set_defaults(func=cmd_play)

    serve = subparsers.add_parser(
        "serve-env",
        help="serve an environment over HTTP (train on it with env=remote)",
        description="Serve ENV over HTTP, many episodes at once (ragen/envs/serving/http_server.py has the "
        "protocol). Train or evaluate on it with `ragen train env=remote "
        "env.config.url=http://HOST:PORT` or `ragen eval --env remote --env-config "
        "url=http://HOST:PORT`.",
    )
    serve.add_argument("env", help=ENV_HELP)
    serve.add_argument(
        "--protocol",
        choices=("ragen", "openenv"),
        default="ragen",
        help="ragen: this project's JSON protocol (env=remote); openenv: OpenEnv's HTTP + "
        "WebSocket API for OpenEnv clients such as TRL (env=openenv; needs ragen[openenv])",
    )
    serve.add_argument("--port", type=_port, default=8765, help="TCP port (0: any free port)")
    serve.add_argument("--host", default="127.0.0.1", help="address to listen on (0.0.0.0: all)")
    serve.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="env config override (YAML value), e.g. --set size=9",
    )
    serve.add_argument(
        "--max-episodes",
        type=int,
        default=4096,
        help="episodes held at once (ragen: the least recently used is dropped for a new "
        "one; openenv: WebSocket sessions, a new one beyond is refused)",
    )
    serve.add_argument("--quiet", action="store_true", help="do not log every request")
    serve.add_argument(
        "--token",
        default=None,
        help="require 'Authorization: Bearer TOKEN' on every request (default: the "
        "RAGEN_ENV_TOKEN environment variable; clients read the same variable); use one "
        "whenever --host is not a loopback address",
    )
    serve.add_argument(
        "--read-timeout",
        type=float,
        default=30.0,
        help="seconds a connection may take to send a request before it is closed",
    )
    serve.add_argument(
        "--max-threads",
        type=int,
        default=128,
        help="requests served at once (openenv: HTTP connections open at once); more are "
        "answered 503 (busy) at once",
    )
    serve.add_argument(
        "--episode-timeout",
        type=float,
        default=3600.0,
        help="seconds an episode may sit unused before it is dropped (a client that died "
        "without closing it)",
    )
    serve.set_defaults(func=cmd_serve_env)


# -- ragen envs ---------------------------------------------------------------------------------
def cmd_envs(args: argparse.Namespace) -> int:
    if args.names:
        for n, name in enumerate(args.names):
            print("\n" * bool(n) + describe_env(name), end="")
        return 0
    width = max(len(n) for n in names())
    for name in names():
        print(f"{name:<{width}}  {spec(name).description}")
        if args.keys:
            try:
                keys = config_keys(name)
            except ImportError as err:  # optional dependency missing: still list the env
                print(f"{'':<{width}}    (config unavailable: {err})")
                continue
            for key, default in keys.items():
                print(f"{'':<{width}}    {key} = {default!r}")
    if args.summary:
        print()
        print_solver_summary(solver_summary(names(), episodes=args.episodes))
    elif not args.keys:
        print(
            "\nOptions: `ragen envs --keys` (every env's), `ragen envs NAME` (one env in full; "
            "`ragen envs reasoning_gym` lists reasoning-gym's tasks, `ragen envs textarena` "
            "TextArena's games). Your own env: env=package.module:Class, "
            "path/to/file.py:Class or a `ragen.envs` entry point (docs/ENVIRONMENTS.md)."
        )
    return 0


def describe_env(name: str) -> str:
    """``ragen envs NAME``: the env's description, class, options with their defaults
    (``--set``, ``env.config.KEY``, ``--env-config``), the turn budget of its preset, and
    the catalogue it loads from by name (reasoning-gym's tasks, TextArena's games)."""
    record = spec(name)
    lines = [f"{name}: {record.description}", f"  class: {record.target}"]
    keys = config_keys(name)
    lines.append("  options (--set KEY=VALUE, env.config.KEY=VALUE, --env-config KEY=VALUE):")
    lines += [f"    {key} = {default!r}" for key, default in keys.items()] or ["    (none)"]
    preset = _ENV_PRESETS / f"{name}.yaml"
    if preset.is_file():
        rollout = (yaml.safe_load(preset.read_text()) or {}).get("rollout") or {}
        shown = ", ".join(f"{k}={v}" for k, v in rollout.items())
        lines.append(f"  turn budget (ragen train env={name}, ragen eval --env {name}): {shown}")
    cls = record.load_class()
    catalogue = None
    try:
        if issubclass(cls, ReasoningGymEnv):
            catalogue = ("reasoning-gym tasks (task=NAME or task=[A,B])", task_names())
        elif issubclass(cls, TextArenaEnv):
            import_textarena()
            # deferred: a module of the optional textarena package (import_textarena
            # above says how to install it when it is missing)
            from textarena.envs.registration import ENV_REGISTRY

            games = sorted(k.removesuffix("-raw") for k in ENV_REGISTRY if k.endswith("-raw"))
            catalogue = ("TextArena games (game=ID; single-player ones play here)", games)
    except MissingDependencyError as err:
        lines.append(f"  ({err})")
    if catalogue is not None:
        title, items = catalogue
        lines.append(f"  {len(items)} {title}:")
        lines += textwrap.wrap(
            ", ".join(items), 96, initial_indent="    ", subsequent_indent="    "
        )
    return "\n".join(lines) + "\n"


# -- ragen play ---------------------------------------------------------------------------------
def parse_overrides(items: list[str]) -> dict[str, Any]:
    """``--set`` values: ``["a=1", "p=1/3"]`` -> ``{"a": 1, "p": 0.333..}`` (see
    :func:`ragen.cli_utils.parse_key_values`, the parser of every command)."""
    return parse_key_values(items, "--set")


def make_from_cli(name: str, config: dict[str, Any]) -> Any:
    """``make(name, **config)`` for ``--set`` options: an option value the env rejects
    (``--set dim_room=abc``) is a one-line :class:`~ragen.errors.EnvConfigError`."""
    try:
        return make(name, **config)
    except RagenError:
        raise
    except (ValueError, TypeError) as err:  # the env's own check of an option's value
        if not config:  # no options given: a bug of the env, keep its traceback
            raise
        shown = " ".join(f"{k}={v!r}" for k, v in config.items())
        raise EnvConfigError(
            f"--set: env {name!r} rejects {shown}: {err}. Fix: correct the value "
            "(`ragen envs` lists each env's options and defaults)"
        ) from None


def cmd_play(args: argparse.Namespace) -> int:
    config = parse_overrides(args.overrides)
    env = make_from_cli(args.env, config)
    check_plugin(args.env, config)  # a user's own env: checked before it is played
    return play(env, seed=args.seed, solver=args.solver, max_steps=args.max_steps)


def cmd_serve_env(args: argparse.Namespace) -> int:
    config = parse_overrides(args.overrides)
    make_from_cli(args.env, config).close()  # a bad option: one line, before binding
    check_plugin(args.env, config)  # a user's own env: checked before it is served
    # both protocols take the same limits; a bad one, a port in use or a host that is not
    # this machine's is a one-line UsageError (ragen.envs.serving.rules)
    run = serve_openenv if args.protocol == "openenv" else serve
    run(
        args.env,
        config,
        args.host,
        args.port,
        args.max_episodes,
        quiet=args.quiet,
        token=args.token,
        read_timeout=args.read_timeout,
        max_threads=args.max_threads,
        episode_timeout=args.episode_timeout,
    )
    return 0


def play(
    env: Any, seed: int = 0, solver: bool = False, max_steps: int = 500, out: TextIO | None = None
) -> int:
    """Interactive loop (or the solver playing) on ``env``; returns an exit code."""
    out = out or sys.stdout

    def say(text: str = "") -> None:
        print(text, file=out, flush=True)

    obs = env.reset(seed)
    say(env.instructions)
    say("-" * 40)
    say(obs)
    total, steps = 0.0, 0
    while not env.done and steps < max_steps:
        if solver:
            action = env.oracle_action()
            if action is None:
                say("(the solver has no move from this state)")
                break
            say(f"solver> {action}")
        else:
            try:
                action = input("action> ")
            except EOFError:
                say()
                break
            if action.strip().lower() in _QUIT_WORDS:
                break
            if not action.strip():
                continue
        obs, reward, terminated, truncated, info = env.step(action)
        steps += info["action_is_valid"]
        total += reward
        say(obs)
        extras = {
            k: v
            for k, v in info.items()
            if k not in ("action_is_valid", "action_is_effective", "success")
        }
        say(
            f"reward={reward:+.2f}  total={total:+.2f}  terminated={terminated}"
            f"  truncated={truncated}  valid={info['action_is_valid']}"
            f"  effective={info['action_is_effective']}  success={info['success']}"
            + (f"  {extras}" if extras else "")
        )
        if not info["action_is_valid"] and env.action_names:
            say(f"(not an action; use one of: {', '.join(env.action_names)})")
    say(f"episode over: success={env.success}  total reward={total:+.2f}  steps={steps}")
    return 0


# -- reference policies -------------------------------------------------------------------------
def solver_summary(
    env_names: list[str],
    episodes: int = 20,
    seed: int = 0,
    max_steps: int = 200,
    configs: dict[str, dict[str, Any]] | None = None,
) -> list[dict[str, Any]]:
    """Oracle (built-in solver) vs uniformly random policy on each env.

    Each policy plays ``episodes`` episodes on seeds ``seed, seed+1, ...`` (at most
    ``max_steps`` steps). Envs whose optional dependency is missing, or that cannot be built
    without config (``remote`` needs a url), are skipped.

    Returns:
        One dict per env: ``env``, ``episodes``, and for ``p`` in (``oracle``, ``random``):
        ``{p}_success`` (rate in [0, 1]), ``{p}_reward`` (mean episode return) and
        ``{p}_steps`` (mean steps); the oracle entries are None when the env has no solver.
    """
    rows = []
    for name in env_names:
        try:
            env = make(name, **(configs or {}).get(name, {}))
        except (ImportError, EnvConfigError):  # an optional dependency; remote without a url
            continue
        row: dict[str, Any] = {"env": name, "episodes": episodes}
        for policy in ("oracle", "random"):
            results = []
            for ep in range(episodes):
                env.reset(seed + ep, rng_seed=derive_seed("summary", policy, seed, ep))
                rng = random.Random(derive_seed("random-policy", seed, ep))
                total, steps = 0.0, 0
                while not env.done and steps < max_steps:
                    action = env.oracle_action() if policy == "oracle" else env.random_action(rng)
                    if action is None:
                        break
                    reward = env.step(action)[1]
                    total += reward
                    steps += 1
                if policy == "oracle" and steps == 0 and not env.done:
                    results = None  # no solver for this env
                    break
                results.append((env.success, total, steps))
            for key, idx in (("success", 0), ("reward", 1), ("steps", 2)):
                row[f"{policy}_{key}"] = (
                    None if results is None else sum(float(r[idx]) for r in results) / len(results)
                )
        env.close()
        rows.append(row)
    return rows


def format_solver_summary(rows: list[dict[str, Any]]) -> str:
    """A fixed-width table of :func:`solver_summary` rows."""

    def cell(value: Any, pct: bool = False) -> str:
        if value is None:
            return "-"
        return f"{100 * value:.0f}%" if pct else f"{value:.2f}"

    w = max([16, *(len(r["env"]) for r in rows)])
    header = (
        f"{'env':<{w}} {'oracle succ':>11} {'reward':>7} {'steps':>6}   "
        f"{'random succ':>11} {'reward':>7} {'steps':>6}"
    )
    lines = [header, "-" * len(header)]
    for r in rows:
        lines.append(
            f"{r['env']:<{w}} {cell(r['oracle_success'], True):>11} {cell(r['oracle_reward']):>7} "
            f"{cell(r['oracle_steps']):>6}   {cell(r['random_success'], True):>11} "
            f"{cell(r['random_reward']):>7} {cell(r['random_steps']):>6}"
        )
    return "\n".join(lines)


def print_solver_summary(rows: list[dict[str, Any]], file: TextIO | None = None) -> None:
    print(format_solver_summary(rows), file=file or sys.stdout)
