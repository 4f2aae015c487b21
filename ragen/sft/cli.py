"""``ragen sft`` (expert data + supervised warm start) and ``ragen sft merge``."""

from __future__ import annotations

import argparse


def _kv(items: list[str]) -> dict:
    import yaml

    out = {}
    for item in items:
        if "=" not in item:
            raise ValueError(f"--env-config expects KEY=VALUE, got {item!r}")
        k, v = item.split("=", 1)
        out[k] = yaml.safe_load(v)
    return out


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "sft",
        help="supervised warm start on solver (expert) trajectories",
        description="Generate expert trajectories from the env's solver and fine-tune a model on them.",
    )
    sub = p.add_subparsers(dest="sft_command")
    p.add_argument(
        "--model", default="tiny", help="base model: tiny[:SIZE], folder, .gguf or hub id"
    )
    p.add_argument("--env", default="sokoban")
    p.add_argument("--env-config", nargs="*", default=[], metavar="KEY=VALUE")
    p.add_argument("--out", required=False, help="output folder (HF format)")
    p.add_argument("--episodes", type=int, default=512)
    p.add_argument(
        "--epsilon", type=float, default=0.0, help="fraction of expert actions made random"
    )
    p.add_argument("--actions-per-turn", type=int, default=1, help="expert actions per response")
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--lr", type=float, default=5e-4)
    p.add_argument(
        "--lora-rank", type=int, default=0, help="> 0 trains LoRA adapters (then merged)"
    )
    p.add_argument("--max-turns", type=int, default=5)
    p.add_argument(
        "--max-actions-per-turn",
        type=int,
        default=5,
        help="the limit the prompts state; match the RL run's rollout.max_actions_per_turn",
    )
    p.add_argument("--prompt-style", choices=["full", "compact"], default="full")
    p.add_argument(
        "--context-window",
        type=int,
        default=None,
        help="turns of history in each prompt (0: the current state only; default: all); "
        "match the RL run's rollout.context_window",
    )
    p.add_argument("--no-think", action="store_true", help="answer-only format")
    p.add_argument("--seed", type=int, default=0)
    p.set_defaults(func=run)
    m = sub.add_parser("merge", help="fold a LoRA adapter into its base model")
    m.add_argument("--base", required=True)
    m.add_argument("--adapter", required=True)
    m.add_argument("--out", required=True)
    m.set_defaults(func=run_merge)


def run(args: argparse.Namespace) -> int:
    from .trainer import SFTConfig, run_sft

    if not args.out:
        raise ValueError("ragen sft needs --out DIR (where the fine-tuned model is saved)")
    cfg = SFTConfig(
        env=args.env,
        env_config=_kv(args.env_config),
        episodes=args.episodes,
        epsilon=args.epsilon,
        actions_per_turn=args.actions_per_turn,
        epochs=args.epochs,
        batch_size=args.batch_size,
        lr=args.lr,
        lora_rank=args.lora_rank,
        max_turns=args.max_turns,
        max_actions_per_turn=args.max_actions_per_turn,
        think=not args.no_think,
        prompt_style=args.prompt_style,
        context_window=args.context_window,
        seed=args.seed,
    )
    run_sft(args.model, args.out, cfg)
    return 0


def run_merge(args: argparse.Namespace) -> int:
    from .trainer import merge_adapter

    out = merge_adapter(args.base, args.adapter, args.out)
    print(f"merged model saved to {out}")
    return 0
