"""The README's quick tour: each step reads what the previous one wrote."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

from ragen.cli import build_parser

README = Path(__file__).resolve().parents[1] / "README.md"


def _tour() -> list[list[str]]:
    """The quick tour's commands as argv lists (``ragen`` dropped, comments cut)."""
    text = README.read_text(encoding="utf-8")
    block = re.search(r"## Quick tour.*?```bash\n(.*?)```", text, re.S).group(1)
    commands = []
    for line in block.splitlines():
        argv = shlex.split(line, comments=True)
        assert argv[0].endswith("ragen"), line
        commands.append(argv[1:])
    return commands


def _parsed(name: str):
    """(args, namespace) of each tour command whose subcommand is ``name``."""
    parser = build_parser()
    return [(argv, parser.parse_args(argv)) for argv in _tour() if argv[0] == name]


def test_every_tour_command_parses():
    parser = build_parser()
    for argv in _tour():
        parser.parse_args(argv)


def test_each_step_reads_the_previous_steps_output():
    ((_, tiny),) = _parsed("models")
    ((_, sft),) = _parsed("sft")
    trains = [(argv, ns) for argv, ns in _parsed("train") if not ns.list_presets]
    ((train_argv, _),) = trains
    evals = [ns for _, ns in _parsed("eval")]
    overrides = dict(arg.split("=", 1) for arg in train_argv[1:])
    assert sft.model == tiny.out  # the tiny model is the SFT base
    assert overrides["model.path"] == sft.out  # train starts from the SFT model
    run_dir = overrides["trainer.run_dir"]
    assert int(overrides["trainer.save_every"]) <= int(overrides["trainer.total_steps"])
    assert evals[-1].model == run_dir  # eval reads the run's newest checkpoint
    assert evals[-1].env == sft.env == overrides["env"]
    # the SFT data are prompted exactly as the RL rollouts will be
    assert str(sft.max_turns) == overrides["rollout.max_turns"]
    assert sft.prompt_style == overrides["rollout.prompt_style"]


def test_tour_train_config_is_valid():
    from ragen.trainer.config import load_config

    ((train_argv, _),) = [(a, ns) for a, ns in _parsed("train") if not ns.list_presets]
    config = load_config(train_argv[1:])
    assert config.trainer.total_steps <= 5  # minutes, not hours, on a CPU
