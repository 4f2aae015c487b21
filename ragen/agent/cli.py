"""ragen eval: play validation seeds with a model (or a reference policy) and report.

ragen eval --model oracle --env sokoban --n 64
ragen eval --model runs/tiny-small --env frozen_lake --n 32 --max-new-tokens 64 --out runs/eval
ragen eval --api-base http://localhost:8000/v1 --model Qwen2.5-0.5B-Instruct --env sokoban
ragen eval --model random --env sokoban --env-config dim_room=[8,8] num_boxes=2
ragen eval --model runs/sokoban-starpo-s --env sokoban   # a run: its newest checkpoint

The turn budget is the env's own, as `ragen train env=NAME` takes it (its preset in
ragen/configs/env: Sokoban 5 turns of up to 5 actions, 10 per episode; the bandit one
pull), and the oracle/random play as many actions per turn as the budget allows; a model
preset (smollm2, tiny, qwen2.5-0.5b) brings its token budget. Given a training run's
checkpoint (RUN, RUN/checkpoints/step_N or its actor folder), eval uses the run's rollout
settings (max_new_tokens, prompt_style, max_turns, ...) instead. Flags given win over all
of these; the table's header says the budget played. Long runs print a progress line per
batch to stderr.
"""

from __future__ import annotations

import argparse
import sys

from ragen.cli_utils import HelpFormatter, add_env_config_flag, check_out_dir, parse_key_values
from ragen.envs import check_options as check_env_options
from ragen.envs.checker import check_plugin
from ragen.errors import UsageError

from .evaluate import (
    REFERENCE_POLICIES,
    Progress,
    budget_text,
    check_seed_offset,
    find_training_run,
    format_table,
    preset_settings,
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
    p.add_argument(
        "--env",
        required=True,
        help="registered environment name (see `ragen envs`), or your own Env class: "
        "package.module:Class, path/to/file.py:Class or an installed `ragen.envs` entry point",
    )
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
        default=None,
        help="play at most this many groups per batch (default: as many as the K/V "
        "caches at --max-model-len tokens fit in 40%% of the free memory; 0: all at once)",
    )
    p.add_argument(
        "--epsilon",
        type=float,
        default=0.0,
        help="oracle only: probability of replacing an action by a random one",
    )
    p.add_argument(
        "--actions-per-turn",
        type=int,
        default=None,
        help="oracle/random only: actions per response (default: --max-actions-per-turn, the "
        "most the budget allows)",
    )
    p.set_defaults(func=run_eval)


def run_eval(args: argparse.Namespace) -> int:
    if not 0 <= args.epsilon <= 1:  # also NaN
        raise UsageError(
            f"--epsilon must be in [0, 1] (the share of oracle actions made random), got "
            f"{args.epsilon}. Fix: e.g. --epsilon 0.1"
        )
    model, inherited, preset_env_config, notes = _run_settings(args)
    config = rollout_from_args(args, inherited=inherited)
    config.validate(prefix="--")
    env_config = {**preset_env_config, **parse_key_values(args.env_config, "--env-config")}
    check_env_options(args.env, env_config, "--env-config")
    check_plugin(args.env, env_config)  # a user's own env: checked before it is played
    actions_per_turn = args.actions_per_turn
    if actions_per_turn is None:  # the reference policies use the turn's whole budget
        actions_per_turn = config.max_actions_per_turn
    if not 1 <= actions_per_turn <= config.max_actions_per_turn:
        raise UsageError(
            f"--actions-per-turn {actions_per_turn} must be between 1 and the turn's budget "
            f"--max-actions-per-turn {config.max_actions_per_turn}. Fix: lower it, or raise "
            "--max-actions-per-turn"
        )
    if args.out:
        check_out_dir(args.out)  # before the evaluation, not after it
    check_seed_offset(args.seed_offset, args.n // max(args.group_size, 1))
    for note in notes:  # what was inherited, once the cheap checks have passed
        print(note, file=sys.stderr)
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
        actions_per_turn=actions_per_turn,
        progress=Progress(),
        command=["ragen", *getattr(args, "argv", ["eval"])],
    )
    m = result.metrics
    title = (
        f"ragen eval  model={args.model}  env={args.env}  n={args.n}  "
        f"group_size={args.group_size}  ({m['eval_seconds']:.1f}s)\n"
        + budget_text(config, args.model, actions_per_turn)
    )
    print(format_table(m, title))
    if args.out:
        print(f"wrote {args.out}/trajectories.jsonl, metrics.json and results.md")
    return 0


def _run_settings(args: argparse.Namespace) -> tuple[str, dict, dict, list[str]]:
    """``(model to load, rollout settings it inherits, env options it inherits, the
    lines that say what was inherited from where)``.

    Lowest first: the env's preset (``ragen/configs/env/ENV.yaml``: its turn budget, and
    its env options), the model preset's (``smollm2``: its token budget), a training
    run's settings (its checkpoint's ``train_config.json``); flags given win over all,
    and are left out of the lines that say what was inherited from where."""
    given = given_rollout_flags(args)
    inherited: dict = {}
    notes: list[str] = []
    env_rollout, env_config, env_file = preset_settings("env", args.env)
    sources = [(f"env preset {args.env}", env_file, env_rollout)]
    model = args.model
    if not args.api_base and args.model not in REFERENCE_POLICIES:
        model_rollout, _, model_file = preset_settings("model", args.model)
        sources.append((f"model preset {args.model}", model_file, model_rollout))
        run = find_training_run(args.model)
        if run is not None:
            model = run.model
            sources.append(("the run", None, run_rollout_settings(run.train_config)))
    defaults = getattr(args, "_rollout_defaults", {})
    for label, path, settings in sources:
        taken = {k: v for k, v in settings.items() if k not in given}
        inherited.update(taken)
        if label != "the run":  # a preset is named only where it changes a default
            taken = {k: v for k, v in taken.items() if defaults.get(k) != v}
        if not taken:
            continue
        shown = ", ".join(f"{k}={v}" for k, v in taken.items())
        where = f" ({path}; flags override)" if path else " (flags override)"
        if label == "the run":  # the line scripts and tests have read since runs came first
            notes.append(f"using the run's rollout settings (flags override): {shown}")
        else:
            notes.append(f"using the settings of {label}{where}: {shown}")
    return model, inherited, env_config, notes
