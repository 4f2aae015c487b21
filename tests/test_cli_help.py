"""Every ``ragen`` (sub)command's options have a help text, and --help shows defaults."""

from __future__ import annotations

import argparse

import pytest

from ragen.cli import build_parser, main, subparsers_of
from ragen.cli_utils import HelpFormatter

COMMANDS = {p.prog: p for p in subparsers_of(build_parser())}


def _options(parser: argparse.ArgumentParser):
    for action in parser._actions:
        if isinstance(action, (argparse._HelpAction, argparse._SubParsersAction)):
            continue
        yield action


def test_every_command_is_covered():
    names = {prog.split(" ", 1)[1] for prog in COMMANDS}
    assert {"envs", "play", "eval", "train", "sft", "demo", "models"} <= names
    assert {"models create-tiny", "models info", "sft merge"} <= names


@pytest.mark.parametrize("prog", sorted(COMMANDS))
def test_each_option_has_help_and_shows_its_default(prog):
    parser = COMMANDS[prog]
    assert issubclass(parser.formatter_class, HelpFormatter), prog
    formatter = parser._get_formatter()
    for action in _options(parser):
        name = "/".join(action.option_strings) or action.dest
        assert action.help, f"{prog} {name}: no help text"
        has_default = action.default not in (None, argparse.SUPPRESS, [], False)
        if has_default or action.dest in _ROLLOUT_NAMES:
            shown = formatter._get_help_string(action) % {"default": action.default}
            assert "default" in shown, f"{prog} {name}: the default is not shown"
    parser.format_help()  # renders


_ROLLOUT_NAMES = {"max_new_tokens", "prompt_style", "think", "max_turns", "context_window"}


def test_rollout_flags_show_their_effective_default(capsys):
    with pytest.raises(SystemExit):
        main(["eval", "--help"])
    out = " ".join(capsys.readouterr().out.split())  # argparse wraps the help
    # each flag's help is its RolloutConfig field's help (ragen train --help-config)
    assert "rollout.max_new_tokens: generation budget per turn (tokens) (default: 400)" in out
    assert "rollout.temperature: sampling temperature (0 = greedy) (default: 0.5)" in out
    assert "--reasoning {no_think,free_think," in out and "(default: 256)" in out
    assert "(default: free_think)" in out
