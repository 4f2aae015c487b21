"""ragen eval: play validation seeds with a model (or a reference policy) and report.

ragen eval --model oracle --env sokoban --n 64
ragen eval --model runs/tiny-small --env frozen_lake --n 32 --max-new-tokens 64 --out runs/eval
ragen eval --api-base http://localhost:8000/v1 --model Qwen2.5-0.5B-Instruct --env sokoban
ragen eval --model random --env sokoban --env-config dim_room=[8,8] num_boxes=2
ragen eval --model runs/sokoban-starpo-s --env sokoban   # a run: its newest checkpoint

Given a training run's checkpoint (RUN, RUN/checkpoints/step_N or its actor folder), eval
uses the run's rollout settings (max_new_tokens, prompt_style, max_turns, ...) except
those given as flags, and says which. Long runs print a progress line per batch to stderr.
"""

from __future__ import annotations

import argparse

from ragen.cli_utils import HelpFormatter, add_env_config_flag, check_out_dir, parse_key_values
from ragen.envs import check_options as check_env_options
from ragen.errors import UsageError

from .evaluate import (
    REFERENCE_POLICIES,
    Progress,
    find_training_run,
    format_table,
    run_evaluation,
    run_rollout_settings,
)
from .rollout_flags import add_rollout_flags, given_rollout_flags, rollout_from_args


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "eval",
        help="evaluate a model (or oracle/random) on an environment's validation seeds",
        description=__doc__,
        formatter_class=HelpFormatter,
    )
    p.add_argument(
        "--model",
        required=True,
        help="tiny[:SIZE], model folder, a training run or checkpoint, .gguf file, model "
        "preset, hub id, 'oracle' or 'random' (with --api-base: the served model name)",
    )
    p.add_argument("--env", required=True, help="registered environment name (see `ragen envs`)")
    p.add_argument("--n", type=int, default=256, help="episodes to play")
    p.add_argument(
        "--group-size",
        type=int,
        default=1,
        help="episodes per initial state; pass@k uses k = group size",
    )
    add_rollout_flags(p, defaults={"temperature": 0.5})
    p.add_argument("--seed", type=int, default=0, help="sampling seed")
    p.add_argument(
        "--seed-offset",
        type=int,
        default=0,
        help="skip this many validation seeds (>= 0): play another held-out set",
    )
    add_env_config_flag(p)
    p.add_argument("--out", default=None, help="folder for trajectories.jsonl and metrics.json")
    p.add_argument(
        "--api-base", default=None, help="OpenAI-compatible endpoint, e.g. http://localhost:8000/v1"
    )
    p.add_argument("--device", default=None, help="cpu | cuda | cuda:N (default: auto)")
    p.add_argument("--dtype", default=None, help="float32 | bfloat16 | float16 (default: auto)")
    p.add_argument(
        "--batch-groups",
        type=int,
        default=64,
        help="play at most this many groups per batch (memory; a progress line per batch)",
    )
    p.add_argument(
        "--epsilon",
        type=float,
        default=0.0,
        help="oracle only: probability of replacing an action by a random one",
    )
    p.add_argument(
        "--actions-per-turn", type=int, default=1, help="oracle/random only: actions per response"
    )
    p.set_defaults(func=run_eval)


def run_eval(args: argparse.Namespace) -> int:
    if not 0 <= args.epsilon <= 1:  # also NaN
        raise UsageError(
            f"--epsilon must be in [0, 1] (the share of oracle actions made random), got "
            f"{args.epsilon}. Fix: e.g. --epsilon 0.1"
        )
    model, inherited = _run_settings(args)
    config = rollout_from_args(args, inherited=inherited)
    config.validate(prefix="--")
    env_config = parse_key_values(args.env_config, "--env-config")
    check_env_options(args.env, env_config, "--env-config")
    if args.out:
        check_out_dir(args.out)  # before the evaluation, not after it
    result = run_evaluation(
        model,
        args.env,
        n=args.n,
        group_size=args.group_size,
        temperature=config.temperature,
        max_turns=config.max_turns,
        env_config=env_config,
        out_dir=args.out,
        api_base=args.api_base,
        config=config,
        seed=args.seed,
        seed_offset=args.seed_offset,
        batch_groups=args.batch_groups,
        device=args.device,
        dtype=args.dtype,
        epsilon=args.epsilon,
        actions_per_turn=args.actions_per_turn,
        progress=Progress(),
    )
    m = result.metrics
    title = (
        f"ragen eval  model={args.model}  env={args.env}  n={args.n}  "
        f"group_size={args.group_size}  ({m['eval_seconds']:.1f}s)"
    )
    print(format_table(m, title))
    if args.out:
        print(f"wrote {args.out}/trajectories.jsonl and {args.out}/metrics.json")
    return 0


def _run_settings(args: argparse.Namespace) -> tuple[str, dict]:
    """``(model to load, rollout settings inherited from its training run)``: a run's
    checkpoint brings the run's rollout settings, minus the flags given; says which."""
    import sys

    if args.api_base or args.model in REFERENCE_POLICIES:
        return args.model, {}
    run = find_training_run(args.model)
    if run is None:
        return args.model, {}
    given = given_rollout_flags(args)
    inherited = {k: v for k, v in run_rollout_settings(run.train_config).items() if k not in given}
    if inherited:
        shown = ", ".join(f"{k}={v}" for k, v in inherited.items())
        print(f"using the run's rollout settings (flags override): {shown}", file=sys.stderr)
    return run.model, inherited
