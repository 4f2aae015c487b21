"""The ``ragen`` command line.

Each area registers its own subcommands through a small ``cli`` module exposing
``add_parser(subparsers)``; those modules import torch & co. only inside the
command functions so that ``ragen envs`` starts instantly.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from ragen.cli_utils import HelpFormatter
from ragen.errors import RagenError

# (module, what it provides) -- a missing module is skipped so partial installs still work.
_COMMAND_MODULES = [
    "ragen.envs.cli",  # envs, play
    "ragen.models.cli",  # models create-tiny / fetch-smollm2 / info
    "ragen.agent.cli",  # eval
    "ragen.train_cli",  # train (the trainer with the scale-out it attaches)
    "ragen.sft.cli",  # sft
    "ragen.demo",  # demo
    "ragen.viewer.cli",  # view
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ragen",
        description="Multi-turn RL for LLM agents (StarPO / StarPO-S / TRICO).",
        formatter_class=HelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in _COMMAND_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as err:
            if err.name != name:  # a real missing dependency inside the module
                raise
            continue
        if hasattr(module, "add_parser"):
            module.add_parser(sub)
    for command in subparsers_of(parser):
        command.formatter_class = HelpFormatter  # every --help shows each option's default
    return parser


def subparsers_of(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    """Every (sub)command parser below ``parser``, depth first (``ragen models info`` too)."""
    found = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in dict.fromkeys(action.choices.values()):
                found += [child, *subparsers_of(child)]
    return found


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(argv)
    args.argv = argv  # the command as given: `ragen eval` writes it beside its results
    if not getattr(args, "func", None):
        parser.print_help()
        return 0
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except RagenError as err:
        # A user error carries its own fix: one line, no stack trace (RAGEN_DEBUG=1
        # shows it). Anything else is a bug and propagates with its traceback.
        if os.environ.get("RAGEN_DEBUG", "").strip() not in ("", "0"):
            raise
        message = " ".join(str(err).split())  # always one line
        print(f"ragen {args.command}: error: {message}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
