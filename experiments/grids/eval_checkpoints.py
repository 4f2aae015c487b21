"""A grid study's warm start and RL checkpoints on its held-out states, at any
temperature: did RL change what the policy does at the temperature it trained at, or
only at the study's evaluation temperature?

    python -m experiments.grids.eval_checkpoints --config smollm2-cpu-sk \\
        --out runs/grids/smollm2-cpu-sk --env sokoban --temperature 1.0

For ``seed`` (default 0) of ``env`` in the results folder ``--out``: the warm start
(``<env>/seed<k>/sft``; seed 0's when the study sets ``sft.shared``) and, for each RL
variant folder of that seed, its last checkpoint's actor (``--step N``: that step's),
each on the study's ``eval_episodes`` held-out states
with the same sampling seed (``experiments.grids.run.heldout_success``), so the rows
pair state by state. Prints one line per model and a Markdown table; ``--json FILE``
writes the figures.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from .config import load_study_config
from .run import heldout_success, warm_dir


def checkpoint_actor(variant: Path, step: int | None) -> Path | None:
    """``variant/checkpoints/step_<N>/actor`` for ``step`` (None: the last saved)."""
    steps = sorted((variant / "checkpoints").glob("step_*"))
    if step is not None:
        steps = [s for s in steps if s.name == f"step_{step:06d}"]
    return steps[-1] / "actor" if steps and (steps[-1] / "actor").is_dir() else None


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("overrides", nargs="*", help="study config overrides, key=value")
    p.add_argument("--config", required=True, help="the study's YAML file or preset")
    p.add_argument("--out", required=True, help="the study's results folder")
    p.add_argument("--env", required=True)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--temperature", type=float, default=None, help="default: the study's")
    p.add_argument("--step", type=int, default=None, help="checkpoint step (default: last)")
    p.add_argument("--json", default=None, help="write the figures here too")
    args = p.parse_args(argv)

    extra = [f"eval_temperature={args.temperature}"] if args.temperature is not None else []
    cfg = load_study_config(args.config, [*args.overrides, *extra])
    out = Path(args.out)
    warm = warm_dir(out, cfg, args.env, args.seed)  # seed 0's when the study shares it
    if not (warm / "config.json").exists():
        raise SystemExit(
            f"no warm start in {warm}. Fix: point --out at the study's results "
            "folder and --env/--seed at a run it holds"
        )
    models = {"warm start": warm}
    root = out / args.env / f"seed{args.seed}"  # this seed's RL variants
    variants = sorted(d for d in root.iterdir() if d.is_dir()) if root.is_dir() else []
    for variant in (d for d in variants if d.name != "sft"):
        actor = checkpoint_actor(variant, args.step)
        if actor is not None:
            models[f"{variant.name} ({actor.parent.name})"] = actor
    rows = {}
    for name, path in models.items():
        rows[name] = heldout_success(cfg, args.env, str(path))
        print(f"{name}: {100 * rows[name]['success_rate']:.1f}%", flush=True)
    warm = rows["warm start"]["success_rate"]
    print(
        f"\n{cfg.eval_episodes} held-out {args.env} states, temperature {cfg.eval_temperature}\n"
        "\n| model | success | paired gain | format errors |\n|---|---|---|---|"
    )
    for name, r in rows.items():
        gain = "" if name == "warm start" else f"{100 * (r['success_rate'] - warm):+.1f}"
        errors = 100 * r.get("format_error_rate", 0.0)
        print(f"| {name} | {100 * r['success_rate']:.1f}% | {gain} | {errors:.1f}% |")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
