"""``ragen sft`` (expert data + supervised warm start) and ``ragen sft merge``."""

from __future__ import annotations

import argparse
import sys

from ragen.agent.evaluate import preset_settings
from ragen.agent.rollout_flags import add_rollout_flags, given_rollout_flags, rollout_from_args
from ragen.cli_utils import add_env_config_flag, check_out_dir, parse_key_values
from ragen.envs import check_options as check_env_options
from ragen.envs.checker import check_plugin
from ragen.errors import UsageError

from .config import SFTConfig

# the rollout knobs that shape the expert data's prompts and turns; match the RL run's
_SFT_ROLLOUT_FLAGS = [
    "max_turns",
    "max_actions_per_turn",
    "max_actions_per_trajectory",
    "reasoning",
    "separator",
    "prompt_style",
    "context_window",
    "template_strategy",
]


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "sft",
        help="supervised warm start on solver (expert) trajectories",
        description="Generate expert trajectories from the env's solver and fine-tune a model on them.",
    )
    sub = p.add_subparsers(dest="sft_command")
    p.add_argument(
        "--model",
        default="tiny",
        help="base model: tiny[:SIZE], folder, .gguf file, model preset or hub id",
    )
    p.add_argument(
        "--env",
        default="sokoban",
        help="registered environment (see `ragen envs`), or your own Env class: "
        "package.module:Class, path/to/file.py:Class or an installed `ragen.envs` entry point",
    )
    add_env_config_flag(p)
    p.add_argument("--out", required=False, help="output folder (HF format)")
    p.add_argument("--episodes", type=int, default=512, help="expert episodes to train on")
    p.add_argument(
        "--epsilon", type=float, default=0.0, help="fraction of expert actions made random"
    )
    p.add_argument(
        "--labels",
        choices=("expert", "played"),
        default="expert",
        help="targets: the solver's move in every visited state (expert; with --epsilon "
        "the noise picks the states only, and --context-window 0 is needed) or the move "
        "that was played, random or not (played)",
    )
    p.add_argument(
        "--heldout-episodes",
        type=int,
        default=0,
        help="expert episodes kept apart whose loss and accuracy are reported after every epoch",
    )
    p.add_argument(
        "--warmup-frac", type=float, default=0.0, help="linear LR warm-up share of the steps"
    )
    p.add_argument("--actions-per-turn", type=int, default=1, help="expert actions per response")
    p.add_argument("--epochs", type=int, default=2, help="passes over the expert data")
    p.add_argument("--batch-size", type=int, default=32, help="sequences per optimizer step")
    p.add_argument("--lr", type=float, default=5e-4, help="learning rate (AdamW)")
    p.add_argument(
        "--lora-rank", type=int, default=0, help="> 0 trains LoRA adapters (then merged)"
    )
    p.add_argument(
        "--micro-token-budget", type=int, default=0, help="padded tokens per micro-batch "
        "(0: what fits in the free memory; the run prints the one it took)",
    )  # fmt: skip
    add_rollout_flags(p, _SFT_ROLLOUT_FLAGS)
    p.add_argument("--seed", type=int, default=0, help="seed of the expert episodes and training")
    p.set_defaults(func=run)
    m = sub.add_parser("merge", help="fold a LoRA adapter into its base model")
    m.add_argument("--base", required=True, help="the base model the adapter was trained on")
    m.add_argument("--adapter", required=True, help="the LoRA adapter folder")
    m.add_argument("--out", required=True, help="output folder for the merged model")
    m.set_defaults(func=run_merge)


def run(args: argparse.Namespace) -> int:
    from .trainer import run_sft  # deferred: imports torch

    if not args.out:
        raise UsageError("ragen sft needs --out DIR (where the fine-tuned model is saved)")
    check_out_dir(args.out)  # before the expert data and the training, not after
    env_config = parse_key_values(args.env_config, "--env-config")
    check_env_options(args.env, env_config, "--env-config")
    check_plugin(args.env, env_config)  # a user's own env: checked before its data are made
    # the env's turn budget, as `ragen train env=NAME` takes it: the expert data are
    # prompted as the RL run's rollouts will be unless a flag says otherwise
    preset, _, preset_file = preset_settings("env", args.env)
    given = given_rollout_flags(args)
    inherited = {k: v for k, v in preset.items() if k in _SFT_ROLLOUT_FLAGS and k not in given}
    defaults = getattr(args, "_rollout_defaults", {})
    differ = {k: v for k, v in inherited.items() if defaults.get(k) != v}
    if differ:  # said only where the preset changes a default
        shown = ", ".join(f"{k}={v}" for k, v in differ.items())
        print(
            f"using the settings of env preset {args.env} ({preset_file}; flags override): {shown}",
            file=sys.stderr,
        )
    cfg = SFTConfig(
        env=args.env,
        env_config=env_config,
        rollout=rollout_from_args(args, inherited=inherited, seed=args.seed),
        episodes=args.episodes,
        epsilon=args.epsilon,
        labels=args.labels,
        heldout_episodes=args.heldout_episodes,
        warmup_frac=args.warmup_frac,
        actions_per_turn=args.actions_per_turn,
        epochs=args.epochs,
        batch_size=args.batch_size,
        lr=args.lr,
        lora_rank=args.lora_rank,
        micro_token_budget=args.micro_token_budget,
        seed=args.seed,
    )
    cfg.validate()
    run_sft(args.model, args.out, cfg)
    return 0


def run_merge(args: argparse.Namespace) -> int:
    from ragen.models.lora import merge_adapter  # deferred: imports torch

    out = merge_adapter(args.base, args.adapter, args.out)
    print(f"merged model saved to {out}")
    return 0
