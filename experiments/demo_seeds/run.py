"""The demo's own command over several seeds: ``python -m ragen.demo --seed N`` each, then
one table of every seed's RL gain with its interval, and the seeds pooled.

    python -m experiments.demo_seeds.run --seeds 0 1 2                 # ~1 hour on 2 cores
    python -m experiments.demo_seeds.run --seeds 0 --label jobs1 --demo-arg=--jobs=1
    python -m experiments.demo_seeds.run --seeds 0 1 2 --report-only   # tables from the runs

Each seed runs the demo exactly as a user would (a subprocess, ``--out
<out>/<label>/seedN``), so the figures are of the demo's command, not a proxy study.
``--demo-arg`` passes flags on (``--jobs=1``: both envs one after another on two threads,
which changes the float rounding of every forward: the check that a gain does not hang
on the rounding of one machine).

Results: ``experiments/demo_seeds/results/<label>.json`` (per seed and env: every
policy's success and its per-state outcomes on the held-out states, the paired gain with
its 95% bootstrap interval, and the wall time) and ``<label>.md`` (the table). Pooled
over seeds: the stratified paired bootstrap over (seed, state) pairs and the seed-level
t interval (``ragen.stats``).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from experiments.common import provenance
from ragen.stats import paired_bootstrap, seed_t_interval, stratified_paired_bootstrap

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
ENVS = ("bandit", "frozen_lake", "sokoban")
WARM, AFTER = "warm start (SFT)", "after RL"


def run_seed(out: Path, seed: int, demo_args: list[str]) -> float:
    """``python -m ragen.demo --seed SEED --out OUT`` (+ ``demo_args``); its wall seconds.
    A failed demo stops the sweep: its figures would be garbage."""
    cmd = [sys.executable, "-m", "ragen.demo", "--seed", str(seed), "--out", str(out), *demo_args]
    print("$ " + " ".join(cmd), flush=True)
    tic = time.perf_counter()
    subprocess.run(cmd, check=True)
    return time.perf_counter() - tic


def seed_record(folder: Path) -> dict[str, Any]:
    """One demo run's results.json, checked for per-state outcomes."""
    path = folder / "results.json"
    if not path.is_file():
        raise SystemExit(f"{path} is missing: run that seed first (without --report-only)")
    data = json.loads(path.read_text())
    for env in ENVS:
        row = data.get(env, {})
        if WARM in row and "per_state" not in row[WARM]:
            raise SystemExit(
                f"{path}: {env} has no per-state outcomes (a demo from before they were "
                "kept). Fix: run that seed again"
            )
        fit = sft_fit(folder / env / "sft" / "sft_metrics.jsonl")
        if fit and env in data:
            data[env]["sft_fit"] = fit
    return data


def sft_fit(metrics: Path) -> dict[str, Any] | None:
    """How a warm start's SFT ended (its ``sft_metrics.jsonl``): the training and
    held-out reply accuracy after its last epoch, its optimizer steps, and the extra
    epochs the fit floor gave it (``SFTConfig.end_fit_min_reply_accuracy``), if any."""
    if not metrics.is_file():
        return None
    rows = [json.loads(line) for line in metrics.read_text().splitlines() if line.strip()]
    ends = [r for r in rows if "train_reply_accuracy" in r]
    if not rows or not ends:
        return None
    return {
        "steps": rows[-1]["step"],
        "train_reply_accuracy": ends[-1]["train_reply_accuracy"],
        "heldout_reply_accuracy": ends[-1].get("heldout_reply_accuracy"),
        "extra_epochs": rows[0].get("extra_epochs"),
    }


def summarize(runs: dict[int, dict[str, Any]]) -> dict[str, Any]:
    """Per env: each seed's warm start, after RL and paired gain, then the seeds pooled."""
    summary: dict[str, Any] = {}
    for env in ENVS:
        seeds = [s for s in sorted(runs) if AFTER in runs[s].get(env, {})]
        if not seeds:
            continue
        per_seed, diffs = {}, []
        for s in seeds:
            row = runs[s][env]
            d = [a - b for a, b in zip(row[AFTER]["per_state"], row[WARM]["per_state"])]
            diffs.append(d)
            per_seed[str(s)] = {
                "warm": row[WARM]["success_rate"],
                "after": row[AFTER]["success_rate"],
                "random": row.get("random", {}).get("success_rate"),
                "oracle": row.get("oracle", {}).get("success_rate"),
                "states": len(d),
                "gain": paired_bootstrap(d).to_json(),
            }
        pooled = {
            "stratified": stratified_paired_bootstrap(diffs).to_json(),
            "seed_t": seed_t_interval([sum(d) / len(d) for d in diffs]).to_json(),
        }
        summary[env] = {"seeds": per_seed, "pooled": pooled}
    return summary


def table(summary: dict[str, Any], label: str) -> str:
    """Markdown of :func:`summarize`: one row per (env, seed), then the pooled rows."""
    lines = [
        f"Demo seeds ({label}): success on held-out states at temperature 0.5; gains are "
        "after RL minus the warm start, paired state by state, with 95% intervals "
        "(paired bootstrap over states; pooled: stratified over (seed, state) pairs, and "
        "the seed-level t interval).",
        "",
        "| env | seed | states | random | warm start | after RL | oracle | RL gain (points) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for env, block in summary.items():
        for seed, r in block["seeds"].items():
            lines.append(
                f"| {env} | {seed} | {r['states']} | {_pct(r['random'])} | {_pct(r['warm'])} | "
                f"{_pct(r['after'])} | {_pct(r['oracle'])} | {_interval(r['gain'])} |"
            )
        p = block["pooled"]
        lines.append(
            f"| {env} | pooled ({len(block['seeds'])}) | | | | | | "
            f"{_interval(p['stratified'])}; seed t {_interval(p['seed_t'])} |"
        )
    return "\n".join(lines) + "\n"


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{100 * v:.1f}%"


def _interval(i: dict[str, Any]) -> str:
    lo, hi = i["low"], i["high"]
    bounds = "" if abs(lo) == float("inf") else f" [{100 * lo:+.1f}, {100 * hi:+.1f}]"
    return f"{100 * i['mean']:+.1f}{bounds}"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--out", default="runs/demo_seeds", help="where the demo runs go")
    p.add_argument("--label", default="default", help="this configuration's name")
    p.add_argument("--demo-arg", action="append", default=[], help="a flag for ragen.demo")
    p.add_argument("--report-only", action="store_true", help="tables from finished runs")
    args = p.parse_args(argv)
    base = Path(args.out) / args.label
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{args.label}.json"
    previous = json.loads(path.read_text()) if path.exists() else {}
    wall = {int(k): v for k, v in previous.get("wall_seconds", {}).items()}
    for seed in args.seeds:
        if not args.report_only:
            wall[seed] = run_seed(base / f"seed{seed}", seed, args.demo_arg)
    runs = {s: seed_record(base / f"seed{s}") for s in args.seeds}
    summary = summarize(runs)
    command = "python -m experiments.demo_seeds.run " + " ".join(argv or sys.argv[1:])
    made = provenance(command)  # command, device, commit, date
    if args.report_only and previous.get("commit"):
        # nothing ran: the runs keep the command, commit and date that made them
        keys = ("command", "device", "commit", "date")
        made = {**{k: previous[k] for k in keys if k in previous}, "rebuilt_by": made}
    payload = {
        "label": args.label,
        **made,
        "demo_command": "python -m ragen.demo --seed N " + " ".join(args.demo_arg),
        "seeds": args.seeds,
        "wall_seconds": {str(s): wall[s] for s in args.seeds if s in wall},
        "summary": summary,
        # every policy's per-state outcomes: the pairs behind each interval
        "runs": {str(s): {env: runs[s][env] for env in ENVS if env in runs[s]} for s in runs},
    }
    path.write_text(json.dumps(payload, indent=1) + "\n")
    md = table(summary, args.label)
    (RESULTS / f"{args.label}.md").write_text(md)
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
