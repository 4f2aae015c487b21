"""The paper's findings, each reproduced by one command over several seeds.

    python -m experiments.findings.run echo_trap                 # the CPU sweep
    python -m experiments.findings.run diversity --jobs 2        # two runs side by side
    python -m experiments.findings.run echo_trap --budget gpu    # the same, GPU-sized
    python -m experiments.findings.run filter seeds=[0,1] steps=20
    python -m experiments.findings.run filter --report-only      # figure and table again
    python -m experiments.findings.run --list

A finding is a YAML file in ``experiments/findings/configs/`` (the sweep: variants x
seeds of ``ragen train`` from per-seed warm starts; ``--help-config`` lists the keys).
The command trains every run that is not finished yet (one process, one run at a
time; an interrupted sweep resumes), then writes into ``--results``
(``experiments/findings/results/`` by default):

* ``<finding>.png``: one panel per metric, every seed drawn thin, the mean thick,
  mean ± std over seeds as a band;
* ``<finding>.md``: the command, the paper's claim, the setup and the table (per
  variant: the outcome's last value, mean ± std and per seed, its best, the table
  metrics over the last steps);
* ``<finding>.json``: the same numbers, per run.

With a ``collapse`` section (the early-warning study, ``experiments.findings.prediction``)
the calibration seeds run first, the thresholds chosen on them go to
``<finding>-thresholds.yaml`` (``trainer.collapse.*`` overrides), the scored seeds run
with them, and ``<finding>-collapse.png`` / the ``.md`` report lead times and false
alarms per signal. Run folders (``ragen view <out>`` shows any of them, with the
collapse signals against the thresholds the run used) and warm starts stay under
``--out`` (default ``runs/findings/<finding>``) and ``--root`` (``runs/findings``).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import time
from pathlib import Path
from typing import Any

from experiments.findings import sweep
from experiments.findings.config import (
    FindingConfig,
    describe_config,
    finding_names,
    load_finding,
)

RESULTS_DIR = Path(__file__).parent / "results"


def log(msg: str) -> None:
    print(f"[findings {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def stem(finding: str, budget: str | None) -> str:
    """The name of a finding's result files (``echo_trap``, ``echo_trap-gpu``)."""
    name = Path(finding).stem
    return name if budget in (None, "cpu") else f"{name}-{budget}"


# -- the sweep ------------------------------------------------------------------------
def run_sweep(
    cfg: FindingConfig,
    root: Path,
    out: Path,
    seeds: list[int],
    extra: list[str] = (),
    jobs: int = 1,
) -> None:
    """Every (variant, seed) run: one after another, or ``jobs`` processes side by side
    (each with ``cfg.threads`` threads): the warm starts first, one per distinct warm
    start and seed (variants that play alike share one), then the RL runs."""
    runs = [(name, seed) for name in cfg.variants for seed in seeds]
    if jobs <= 1:
        for name, seed in runs:
            sweep.run_rl(root, out, cfg, name, seed, extra=list(extra), log=log)
        return
    warm = {}  # one job per warm-start folder: two processes never build the same one
    for name, seed in runs:
        warm.setdefault(sweep.warm_dir(root, cfg, cfg.variants[name], seed), (name, seed))
    _in_processes(
        _warm_job, {f"warm start {n} seed {s}": (root, cfg, n, s) for n, s in warm.values()}, jobs
    )
    _in_processes(
        _rl_job, {f"RL {n} seed {s}": (root, out, cfg, n, s, list(extra)) for n, s in runs}, jobs
    )


def _warm_job(root: Path, cfg: FindingConfig, name: str, seed: int) -> None:
    import torch

    torch.set_num_threads(cfg.threads)
    torch.manual_seed(seed)
    sweep.warm_start(root, cfg, cfg.variants[name], seed, log=log)


def _rl_job(root: Path, out: Path, cfg: FindingConfig, name: str, seed: int, extra) -> None:
    sweep.run_rl(root, out, cfg, name, seed, extra=extra, log=log)


def _in_processes(fn, tasks: dict[str, tuple], jobs: int) -> None:
    """``fn(*args)`` for every ``label: args`` of ``tasks``, ``jobs`` spawned processes at
    a time; the others go on when one fails, and the failures are raised together."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor, as_completed

    from ragen.parent_watch import exit_with_parent

    if not tasks:
        return
    failed = []
    ctx = multiprocessing.get_context("spawn")  # a clean torch in every worker
    with ProcessPoolExecutor(
        max_workers=min(jobs, len(tasks)),
        mp_context=ctx,
        initializer=exit_with_parent,
        initargs=(os.getpid(),),
    ) as pool:
        futures = {pool.submit(fn, *args): label for label, args in tasks.items()}
        for future in as_completed(futures):
            try:
                future.result()
                log(f"{futures[future]}: done")
            except Exception as err:  # the other runs go on; this one is reported below
                failed.append(f"{futures[future]}: {type(err).__name__}: {err}")
                log(f"FAILED: {failed[-1]}")
    if failed:
        raise RuntimeError(
            f"{len(failed)} of {len(tasks)} jobs failed (the others finished and are "
            "kept; re-running the command trains only what is missing):\n  " + "\n  ".join(failed)
        )


def evaluate_runs(cfg: FindingConfig, root: Path, out: Path, seeds: list[int], store: dict):
    """Warm start and final policy of every run on ``eval_episodes`` held-out states
    (cached in ``store``; the warm start once per warm key and seed)."""
    for name, variant in cfg.variants.items():
        for seed in seeds:
            key = f"{name}/seed{seed}"
            folder = sweep.run_dir(out, name, seed)
            warm = sweep.warm_start(root, cfg, variant, seed, log=log)
            wkey = f"warm/{warm.parent.name}/seed{seed}"
            if wkey not in store:
                log(f"held-out evaluation of the warm start {wkey}")
                store[wkey] = sweep.heldout(cfg, variant, str(warm), cfg.eval_episodes)
            if key not in store:
                log(f"held-out evaluation of {key}")
                actor = sweep.final_actor(folder)
                store[key] = {
                    "warm": wkey,
                    **sweep.heldout(cfg, variant, str(actor), cfg.eval_episodes),
                }


# -- reports --------------------------------------------------------------------------
def _fmt(mean: float, std: float, pct: bool) -> str:
    if mean != mean:
        return "-"
    return f"{100 * mean:.1f} ± {100 * std:.1f}%" if pct else f"{mean:.3f} ± {std:.3f}"


def _is_rate(key: str) -> bool:
    return key.endswith(("success_rate", "_rate", "_acc", "_frac"))


def sweep_table(
    cfg: FindingConfig, out: Path, seeds: list[int], evals: dict
) -> tuple[str, dict[str, Any]]:
    """The markdown table of the sweep and its numbers per run."""
    rows, data = [], {}
    pct = _is_rate(cfg.outcome)
    head = ["variant", "seeds", f"{cfg.outcome}, last", "per seed", "best"]
    head += [f"{k}, last {cfg.table_last}" for k in cfg.table]
    if cfg.eval_episodes:
        head += [f"held-out success ({cfg.eval_episodes} states): warm start", "after RL",
                 "gain (paired)"]  # fmt: skip
    for name, variant in cfg.variants.items():
        runs = {}
        for seed in seeds:
            folder = sweep.run_dir(out, name, seed)
            if (folder / sweep.DONE).exists():
                runs[seed] = sweep.summarize(folder, cfg)
                if cfg.eval_episodes and f"{name}/seed{seed}" in evals:
                    ev = evals[f"{name}/seed{seed}"]
                    runs[seed]["heldout"] = ev.get("success_rate")
                    runs[seed]["heldout_warm"] = evals[ev["warm"]].get("success_rate")
        data[name] = runs
        if not runs:
            continue
        last = [r["outcome_last"] for r in runs.values()]
        per_seed = ", ".join(
            f"s{s} {100 * r['outcome_last']:.1f}" if pct else f"s{s} {r['outcome_last']:.3f}"
            for s, r in runs.items()
        )
        cells = [variant.label or name, str(len(runs)), _fmt(*sweep.mean_std(last), pct),
                 per_seed, _fmt(*sweep.mean_std([r["outcome_best"] for r in runs.values()]), pct)]  # fmt: skip
        cells += [_fmt(*sweep.mean_std([r[k] for r in runs.values()]), _is_rate(k))
                  for k in cfg.table]  # fmt: skip
        if cfg.eval_episodes:
            warm = [r.get("heldout_warm", float("nan")) for r in runs.values()]
            after = [r.get("heldout", float("nan")) for r in runs.values()]
            gain = [a - w for a, w in zip(after, warm)]
            cells += [_fmt(*sweep.mean_std(warm), True), _fmt(*sweep.mean_std(after), True),
                      f"{100 * sweep.mean_std(gain)[0]:+.1f} ± {100 * sweep.mean_std(gain)[1]:.1f}"]  # fmt: skip
        rows.append(cells)
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines) + "\n", data


def setup_text(cfg: FindingConfig) -> str:
    shape = (
        f"{cfg.env} ({cfg.max_turns} turn{'s' if cfg.max_turns > 1 else ''}, "
        f"{cfg.reasoning}), model {cfg.model} warm-started by SFT on "
        f"{cfg.warm.episodes} expert episodes (epsilon {cfg.warm.epsilon}, labels "
        f"{cfg.warm.labels}), then {cfg.steps} RL steps of {cfg.env_groups} groups x "
        f"{cfg.group_size} episodes ({cfg.algo} unless the variant says otherwise), "
        f"one optimizer step per training step; validation every {cfg.val_every} steps "
        f"on {cfg.val_groups} held-out episodes at temperature 0.5"
    )
    lines = [f"Setup: {shape}.", "", "Variants (`ragen train` overrides on top):", ""]
    for name, v in cfg.variants.items():
        bits = [f"{k}={getattr(v, k)}" for k in
                ("algo", "reasoning", "actions_per_turn", "env_groups", "group_size", "actor_lr")
                if getattr(v, k) is not None]  # fmt: skip
        bits += [f"`{o}`" for o in v.overrides]
        lines.append(f"* **{v.label or name}**: {', '.join(bits) or 'the base settings'}")
    return "\n".join(lines)


def panel_specs(cfg: FindingConfig) -> list[tuple[str, str, str]]:
    """``(key, title, x axis)`` of each ``curves`` entry ("key|title|episodes")."""
    specs = []
    for entry in cfg.curves:
        key, title, x = (entry.split("|") + ["", ""])[:3]
        specs.append((key, title or key, x or cfg.x_axis))
    return specs


def collect_series(cfg: FindingConfig, out: Path, seeds: list[int]) -> dict:
    """``series[variant][seed]["key@x"] = [(x, value)]`` for every panel."""
    specs = panel_specs(cfg)
    series: dict[str, dict[int, dict]] = {}
    for name, variant in cfg.variants.items():
        per_rollout = sweep.episodes_per_rollout(cfg, variant)
        for seed in seeds:
            folder = sweep.run_dir(out, name, seed)
            if not (folder / sweep.DONE).exists():
                continue
            curves = {}
            for axis in sorted({x for _, _, x in specs}):
                keys = [k for k, _, x in specs if x == axis]
                for k, points in sweep.read_curves(folder, keys, axis, per_rollout).items():
                    curves[f"{k}@{axis}"] = points
            series.setdefault(name, {})[seed] = curves
    return series


def report(
    finding: str, budget: str | None, cfg: FindingConfig, out: Path, results: Path, command: str
) -> Path:
    """Figure, table and numbers of the sweep (and of the collapse study, if any)."""
    seeds = sweep.all_seeds(cfg)
    name = stem(finding, budget)
    evals_path = out / "heldout.json"
    evals = json.loads(evals_path.read_text()) if evals_path.exists() else {}
    series = collect_series(cfg, out, seeds)
    from experiments.findings.plots import plot_sweep

    panels = [(f"{k}@{x}", t, "step" if x == "step" else "env episodes sampled")
              for k, t, x in panel_specs(cfg)]  # fmt: skip
    labels = {n: v.label or n for n, v in cfg.variants.items()}
    figure = plot_sweep(series, panels, results / f"{name}.png", cfg.title, labels)
    table, data = sweep_table(cfg, out, seeds, evals)
    text = [
        f"# {cfg.title or name}",
        "",
        f"Command: `{command}`",
        "",
        f"Paper's claim: {cfg.claim.strip()}",
        "",
        setup_text(cfg),
        "",
        f"![{name}]({figure.name})",
        "",
        table,
    ]
    # every run's curves (the panels' values per step), so that a figure read off the
    # picture is in the file too (python -m experiments.report reads this file)
    curves = {v: {str(s): c for s, c in runs.items()} for v, runs in series.items()}
    numbers: dict[str, Any] = {"command": command, "runs": data, "heldout": evals,
                               "curves": curves}  # fmt: skip
    if cfg.collapse is not None:
        from experiments.findings import collapse_report

        part, numbers["collapse"] = collapse_report.write(cfg, out, results, name)
        text += ["", part]
    (results / f"{name}.md").write_text("\n".join(text) + "\n")
    (results / f"{name}.json").write_text(json.dumps(numbers, indent=1, default=str))
    return results / f"{name}.md"


# -- the command ----------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("finding", nargs="?", help="a finding in configs/ (or a YAML file)")
    p.add_argument("overrides", nargs="*", help="config overrides, key=value (dotted)")
    p.add_argument("--budget", default=None, help="a size named in the file's budgets (gpu)")
    p.add_argument("--out", default=None, help="run folders (default runs/findings/<finding>)")
    p.add_argument("--root", default="runs/findings", help="shared warm starts live here")
    p.add_argument("--results", default=str(RESULTS_DIR), help="figure, table and numbers")
    p.add_argument("--report-only", action="store_true", help="no training: report")
    p.add_argument(
        "--jobs",
        type=int,
        default=1,
        help="runs trained side by side in separate processes (each with the finding's "
        "threads; e.g. 2 on a 2-core CPU)",
    )
    p.add_argument("--list", action="store_true", help="the findings and their titles")
    p.add_argument("--help-config", action="store_true", help="every config key with its help")
    args = p.parse_intermixed_args(argv)  # overrides before or after the options
    if args.help_config:
        print(describe_config())
        return 0
    if args.list or not args.finding:
        for name in finding_names():
            print(f"{name:<22} {load_finding(name).title}")
        return 0
    from ragen.errors import RagenError

    try:
        return _run(args)
    except RagenError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2


def _run(args) -> int:
    cfg = load_finding(args.finding, args.budget, args.overrides)
    name = stem(args.finding, args.budget)
    root = Path(args.root)
    out = Path(args.out or root / name)
    results = Path(args.results)
    results.mkdir(parents=True, exist_ok=True)
    out.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("OMP_NUM_THREADS", str(cfg.threads))
    # the command that trains the sweep (a --report-only rerun reports the same runs)
    argv = [a for a in sys.argv[1:] if a != "--report-only"]
    command = shlex.join(["python", "-m", "experiments.findings.run", *argv])
    if not args.report_only:
        from ragen.errors import UsageError

        if args.jobs < 1:
            raise UsageError(f"--jobs must be >= 1, got {args.jobs}")
        if cfg.collapse is None:
            run_sweep(cfg, root, out, cfg.seeds, jobs=args.jobs)
        else:
            from experiments.findings import collapse_report

            run_sweep(cfg, root, out, cfg.collapse.calibrate_seeds, jobs=args.jobs)
            extra = collapse_report.calibrate_and_save(cfg, out, results, name)
            run_sweep(cfg, root, out, cfg.collapse.score_seeds, extra, jobs=args.jobs)
        if cfg.eval_episodes:
            evals_path = out / "heldout.json"
            evals = json.loads(evals_path.read_text()) if evals_path.exists() else {}
            try:
                evaluate_runs(cfg, root, out, sweep.all_seeds(cfg), evals)
            finally:
                evals_path.write_text(json.dumps(evals, indent=1))
    path = report(args.finding, args.budget, cfg, out, results, command)
    log(f"report: {path}")
    print(path.read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
