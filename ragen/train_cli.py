"""``ragen train env=... algo=... model=... section.key=value ...``

The one place the trainer and the scale-out meet: ``ragen.trainer`` never imports
``ragen.distributed`` (which builds on the trainer's phases), so the command hands the
trainer the scale-out it attaches when ``trainer.rollout_workers`` or
``trainer.train_ranks`` ask for one (:func:`scale_out`).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ragen.envs.checker import check_plugin
from ragen.trainer.signals import TrainingInterrupted


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "train",
        help="train an agent with StarPO / StarPO-S / GRPO / TRICO",
        description=(
            "Train an agent. Arguments are presets (env=NAME algo=PRESET model=PRESET|PATH), "
            "config=FILE.yaml, and dotted overrides such as trainer.total_steps=200 "
            "rollout.group_size=16. Example: ragen train env=sokoban algo=starpo-s model=tiny\n"
            "env= also takes your own Env class: env=my_pkg.module:MyEnv, "
            "env=path/to/file.py:MyEnv or an installed `ragen.envs` entry point (checked "
            "with ragen.envs.checker.check_env before the run starts)."
        ),
    )
    p.add_argument("overrides", nargs="*", help="KEY=VALUE presets and overrides")
    p.add_argument(
        "--print-config",
        action="store_true",
        help="print the resolved config, each key under its help, and exit",
    )
    p.add_argument(
        "--help-config",
        nargs="?",
        const="text",
        choices=("text", "markdown"),
        help="list every config key with its default, type, accepted values and help "
        "(markdown: docs/CONFIG.md), and exit",
    )
    p.add_argument(
        "--list-presets", action="store_true", help="list algo/model/env presets and exit"
    )
    p.set_defaults(func=run)


#: the presets of ``algo=``, ``model=`` and ``env=`` (``ragen.trainer.config`` reads them)
PRESET_DIR = Path(__file__).resolve().parent / "configs"


def run(args: argparse.Namespace) -> int:
    if args.list_presets:  # the preset files alone: no torch to wait for
        for kind in ("algo", "model", "env"):
            names = sorted(p.stem for p in (PRESET_DIR / kind).glob("*.yaml"))
            print(f"{kind}: {', '.join(names)}")
        return 0
    # deferred: the config imports torch (its choices come from ragen.algo), and `ragen
    # --help` must not wait for it
    from ragen.trainer.config import load_config
    from ragen.trainer.config.describe import commented_yaml, help_text, markdown

    if args.help_config:
        print(markdown() if args.help_config == "markdown" else help_text(), end="")
        return 0
    cfg = load_config(args.overrides)
    if args.print_config:
        print(commented_yaml(cfg), end="")
        return 0
    # a plug-in env (env=pkg.module:Class, a file, an entry point) is checked against the
    # contract before any model loads; ragen's own envs are checked by the test suite
    check_plugin(cfg.env.name, cfg.env.config)
    if cfg.env.val_config:
        check_plugin(cfg.env.name, {**cfg.env.config, **cfg.env.val_config})
    from ragen.trainer.starpo import train  # deferred: imports torch

    try:
        train(cfg, argv=args.overrides, scale_out=scale_out)
    except TrainingInterrupted as stop:
        # the message holds what was saved and the exact command that resumes
        print(str(stop), file=sys.stderr, flush=True)
        return stop.exit_code  # 130 after SIGINT, 143 after SIGTERM
    return 0


def scale_out(trainer):
    """Rollout workers and training ranks for ``trainer`` (``ragen.distributed.ScaleOut``;
    Ray and torch.distributed load only for a run that scales out)."""
    from ragen.distributed import ScaleOut  # deferred: imports torch.distributed

    return ScaleOut(trainer)
