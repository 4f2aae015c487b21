"""Echo-trap early warning on the bandit echo-trap runs: lead time, false alarms, rollback.

    OMP_NUM_THREADS=1 .venv/bin/python -m experiments.collapse.run --seeds 0 1 2
    OMP_NUM_THREADS=1 .venv/bin/python -m experiments.collapse.run --runs grpo-rollback-lr grpo-rollback-drgrpo
    .venv/bin/python -m experiments.collapse.run --seeds 0 1 2 --report-only

The same setup as ``experiments.echo_trap.run`` (tiny:nano, format-only SFT warm start per
seed, 16 groups x 4 rollouts, 60 steps), with the collapse detector on
(``trainer.on_collapse=warn``) for ``grpo``, ``starpo`` and ``starpo-s``, and GRPO with
``trainer.on_collapse=rollback`` and a checkpoint every 2 steps, changing at each
rollback either the actor lr (``grpo-rollback-lr``: x0.5) or the estimator
(``grpo-rollback-drgrpo``: Dr.GRPO's, without the std division); ``*-onset`` restore
the checkpoint from before the warned signal began to decline
(``trainer.rollback_to=onset``) instead of the last one before the warning.

Per run it reports: the step at which success collapses (the first step t >= 3 whose
3-step mean train success is below half of the 3-step mean at step 3), the first
``collapse`` event (step, signal), the lead (collapse step - warning step; > 0 means the
warning came first), and the final validation success. Per signal it reports the
detector's diagnostic (``collapse/<signal>``: a_t / peak for drops, x_t / median for the
grad-norm spike, the rise for format errors) at its most extreme on the healthy
StarPO / StarPO-S runs -- the margin the defaults keep -- and on the GRPO runs.
Detector thresholds can be replayed offline on the logged metrics
(``ragen.trainer.collapse.replay``), e.g. ``--replay group_std_ratio=0.6``.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

from experiments.common import cli, parse_study_args
from ragen.demo import Demo
from ragen.recipes import rollout_overrides
from ragen.trainer.collapse import SIGNALS, CollapseConfig, replay
from ragen.trainer.config import load_config
from ragen.trainer.metrics_logger import read_events, read_metrics
from ragen.trainer.starpo import StarPOTrainer

_ROLLBACK = ["trainer.on_collapse=rollback", "trainer.save_every=2"]
RUNS = {
    "grpo": ("grpo", []),
    "starpo": ("starpo", []),
    "starpo-s": ("starpo-s", []),
    # the example: roll back and halve the actor lr (twice at most)
    "grpo-rollback-lr": ("grpo", [*_ROLLBACK, "trainer.rollback_change=[model.actor_lr=*0.5]"]),
    # roll back and drop GRPO's std division (Dr.GRPO's estimator and loss aggregation),
    # the cause of this collapse (docs/FINDINGS.md, section 1)
    "grpo-rollback-drgrpo": (
        "grpo",
        [
            *_ROLLBACK,
            "trainer.rollback_change=[algo.adv_estimator=drgrpo,"
            "algo.loss_agg_mode=seq-mean-token-sum-norm]",
        ],
    ),
}
# the same two changes, restoring the checkpoint from before the signal's decline began
for _name in ("grpo-rollback-lr", "grpo-rollback-drgrpo"):
    RUNS[f"{_name}-onset"] = (RUNS[_name][0], [*RUNS[_name][1], "trainer.rollback_to=onset"])
# only the estimator: Dr.GRPO's loss aggregation changes the gradient scale, and the
# restored Adam second moments (beta2 = 0.999) then shrink the steps for hundreds of steps
RUNS["grpo-rollback-adv-onset"] = (
    "grpo",
    [
        *_ROLLBACK,
        "trainer.rollback_change=[algo.adv_estimator=drgrpo]",
        "trainer.rollback_to=onset",
    ],
)
HEALTHY = ("starpo", "starpo-s")


def collapse_step(rows, window: int = 3) -> int | None:
    """First step t >= window whose ``window``-step mean train success is below half
    of the mean over steps 1..window (None: never)."""
    xs = [(r["step"], r.get("rollout/success_rate")) for r in rows]
    xs = [(s, v) for s, v in xs if isinstance(v, float) and v == v]
    if len(xs) < window:
        return None
    ref = statistics.mean(v for _, v in xs[:window])
    for k in range(window - 1, len(xs)):
        if statistics.mean(v for _, v in xs[k - window + 1 : k + 1]) < 0.5 * ref:
            return xs[k][0]
    return None


def run_one(root: Path, demo: Demo, name: str, steps: int, seed: int) -> Path:
    budget = demo.budget
    algo, extra = RUNS[name]
    run_dir = root / "bandit" / f"rl-{name}"
    if (run_dir / "metrics.jsonl").exists() and (run_dir / "done").exists():
        return run_dir
    groups, size = budget.env_groups, budget.group_size
    kept = groups * size // 4 if algo == "starpo-s" else groups * size
    overrides = [
        *rollout_overrides("bandit"),
        f"algo={algo}",
        "model=tiny",
        f"model.path={demo.sft_dir('bandit')}",
        f"rollout.env_groups={groups}",
        f"rollout.group_size={size}",
        f"rollout.max_new_tokens={budget.max_new_tokens}",
        f"rollout.prompt_style={budget.prompt_style}",
        f"algo.ppo_mini_batch_size={max(1, kept)}",
        f"trainer.total_steps={steps}",
        f"trainer.val_every={max(1, steps // 10)}",
        f"trainer.val_groups={budget.val_groups}",
        f"trainer.save_every={steps}",
        f"trainer.seed={seed}",
        f"trainer.run_dir={run_dir}",
        "trainer.resume=never",
        "trainer.tensorboard=false",
        "trainer.save_trajectories=false",
        *budget.extra,
        *extra,
    ]
    if run_dir.exists():
        import shutil

        shutil.rmtree(run_dir)  # an unfinished run starts over
    StarPOTrainer(load_config(overrides)).train()
    (run_dir / "done").write_text("")
    return run_dir


def summarize(run_dir: Path, cfg: CollapseConfig | None) -> dict:
    rows = read_metrics(run_dir)
    if cfg is None:
        events = read_events(run_dir, "collapse")
        diags = rows
    else:
        warnings, diags = replay(cfg, rows)
        events = [{"step": w.step, "signal": w.signal} for w in warnings]
    val = [r["val/success_rate"] for r in rows if r.get("val/success_rate") is not None]
    first = min(events, key=lambda e: e["step"]) if events else None
    extreme = {}
    for name, (_, kind, _) in SIGNALS.items():
        vals = [d.get(f"collapse/{name}") for d in diags]
        vals = [v for v in vals if isinstance(v, float) and v == v]
        if vals:
            extreme[name] = min(vals) if kind == "drop" else max(vals)
    return {
        "collapse_step": collapse_step(rows),
        "first_warning": first and (first["step"], first["signal"]),
        "signals": sorted({(e["step"], e["signal"]) for e in events}),
        "final_val": val[-1] if val else float("nan"),
        "train_last5": statistics.mean(r["rollout/success_rate"] for r in rows[-5:]),
        "restored": [e["step"] for e in read_events(run_dir, "rollback")],
        "rollbacks": len(read_events(run_dir, "rollback")),
        "extreme": extreme,
    }


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--runs", nargs="+", default=list(RUNS), choices=list(RUNS))
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--out", default="runs/collapse")
    p.add_argument("--report-only", action="store_true")
    p.add_argument("--replay", nargs="*", default=None, help="key=value detector overrides")
    args = parse_study_args(p, argv, __file__)
    budget = args.budget
    cfg = None
    if args.replay is not None:
        cfg = CollapseConfig()
        for item in args.replay:
            k, v = item.split("=", 1)
            setattr(cfg, k, type(getattr(cfg, k))(v))
    table = {}
    for seed in args.seeds:
        root = Path(args.out) / f"seed{seed}"
        demo = Demo(root, budget, ["bandit"], seed=seed)
        if not args.report_only and not (demo.sft_dir("bandit") / "config.json").exists():
            demo.run(["tiny", "sft"])
        for name in args.runs:
            run_dir = root / "bandit" / f"rl-{name}"
            if not args.report_only:
                run_one(root, demo, name, args.steps, seed)
            if (run_dir / "metrics.jsonl").exists():
                table[(name, seed)] = summarize(run_dir, cfg)
    print(
        f"{'run':<26} {'seed':>4} {'collapse':>8} {'1st warning':>24} {'lead':>5} "
        f"{'val end':>7} {'train last5':>11} restored"
    )
    for (name, seed), s in sorted(table.items()):
        w = s["first_warning"]
        lead = s["collapse_step"] - w[0] if (w and s["collapse_step"]) else None
        print(
            f"{name:<26} {seed:>4} {str(s['collapse_step']):>8} "
            f"{(f'{w[0]} {w[1]}' if w else '-'):>24} {str(lead):>5} {s['final_val']:>7.3f} "
            f"{s['train_last5']:>11.3f} {s['restored']}"
        )
    print("\nsignal extremes (drop: min a/peak; grad_norm: max x/median; format: max rise)")
    for name in SIGNALS:
        healthy = [s["extreme"].get(name) for (n, _), s in table.items() if n in HEALTHY]
        grpo = [s["extreme"].get(name) for (n, _), s in table.items() if n == "grpo"]
        fmt = lambda xs: " ".join(f"{x:.3f}" for x in xs if x is not None) or "-"  # noqa: E731
        print(f"  {name:<18} healthy: {fmt(healthy):<40} grpo: {fmt(grpo)}")
    out = Path(args.out) / "summary.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(
        json.dumps({f"{n}/seed{s}": v for (n, s), v in table.items()}, indent=1, default=str)
    )


if __name__ == "__main__":
    raise SystemExit(cli(main))
