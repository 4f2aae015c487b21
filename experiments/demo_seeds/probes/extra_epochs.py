"""Probe: more SFT epochs for a Sokoban warm start still on the loss plateau.

``train`` continues a demo run folder's Sokoban warm start for one more epoch, from a
fresh optimizer and one-epoch schedule with the warm start's own SFT settings (what
``SFTConfig.end_fit_min_reply_accuracy`` runs for each extra epoch) into a new demo
folder; the demo's own stages then score it and train RL from it::

    python -m experiments.demo_seeds.probes.extra_epochs train SRC DST
    python -m ragen.demo --out DST --seed 0 --env sokoban --stage eval \
        --micro-token-budget 4096 --jobs 1        # the warm start on 512 held-out states
    python -m ragen.demo --out DST --seed 0 --env sokoban --stage rl --stage eval \
        --micro-token-budget 4096 --jobs 1        # RL from it, scored the same way

``collect`` writes the JSON beside this file from those folders (README.md).
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import os
from pathlib import Path

HERE = Path(__file__).parent


def train(src: Path, dst: Path) -> None:
    """One more epoch on ``src``'s Sokoban warm start, saved as ``dst``'s warm start."""
    from ragen.agent.rollout import RolloutConfig
    from ragen.sft.config import SFTConfig
    from ragen.sft.trainer import run_sft

    raw = json.loads((src / "sokoban/sft/sft_config.json").read_text())
    raw.pop("base_model")
    raw["rollout"] = RolloutConfig(**raw["rollout"])
    cfg = dataclasses.replace(SFTConfig(**raw), epochs=1)
    (dst / "sokoban").mkdir(parents=True, exist_ok=True)
    if not (dst / "tiny").exists():  # the demo's eval stage looks for the tiny model
        os.symlink((src / "tiny").resolve(), dst / "tiny")
    run_sft(str(src / "sokoban/sft"), dst / "sokoban/sft", cfg)


def _last_fit(folder: Path) -> dict:
    rows = [json.loads(x) for x in (folder / "sokoban/sft/sft_metrics.jsonl").open()]
    return {k: v for k, v in rows[-1].items() if k.startswith(("train_", "heldout_"))}


def collect(stuck: Path, folders: dict[str, Path], commit: str) -> dict:
    """The stuck warm start (``stuck``: its demo folder) and each extra-epoch arm."""
    arms = {"0 extra epochs (the sweep's run)": stuck, **folders}
    out: dict = {
        "command": "python -m experiments.demo_seeds.probes.extra_epochs train SRC DST "
        "(SRC: the previous arm's folder), then python -m ragen.demo --out DST --seed 0 "
        "--env sokoban --stage rl --stage eval --micro-token-budget 4096 --jobs 1 "
        "(README.md beside this file)",
        "device": "CPU (2 cores; two threads, one run at a time)",
        "commit": commit,
        "date": datetime.date.today().isoformat(),
        "stuck_run": "python -m experiments.demo_seeds.run --seeds 0 --label mtb4096 "
        "--demo-arg=--micro-token-budget=4096 (at 311d735): its Sokoban folder",
        "arms": {},
    }
    for name, folder in arms.items():
        rows = json.loads((folder / "results.json").read_text())["sokoban"]
        out["arms"][name] = {
            "fit": _last_fit(folder),
            **{
                policy: {k: rows[policy][k] for k in ("success_rate", "per_state")}
                for policy in ("warm start (SFT)", "after RL")
            },
            "rl_gain": rows["rl_gain"],  # the demo's own; the report recomputes it
        }
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("train")
    t.add_argument("src", type=Path)
    t.add_argument("dst", type=Path)
    c = sub.add_parser("collect")
    c.add_argument("--stuck", type=Path, required=True)
    c.add_argument("--arm", nargs=2, action="append", metavar=("NAME", "FOLDER"), required=True)
    c.add_argument("--commit", required=True)
    c.add_argument("--out", type=Path, default=HERE / "sokoban_extra_epochs.json")
    args = p.parse_args()
    if args.cmd == "train":
        train(args.src, args.dst)
    else:
        arms = {name: Path(folder) for name, folder in args.arm}
        data = collect(args.stuck, arms, args.commit)
        args.out.write_text(json.dumps(data, indent=1) + "\n")
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
