"""The demo's RL step, whole: episodes trained per second, phase by phase, old code vs new.

Profile one configuration (this checkout, or ``--tree DIR``: another checkout's code)::

    OMP_NUM_THREADS=1 .venv/bin/python -m bench.bench_rl_step --model runs/demo/frozen_lake/sft \\
        --groups 64 --group-size 4 --steps 2 --profile

Old against new, side by side (each step in a fresh process, alternating old, new,
old, new, ...; the ratio is of the medians, and of each old/new pair)::

    git worktree add /tmp/ragen-old <commit>
    OMP_NUM_THREADS=1 .venv/bin/python -m bench.bench_rl_step --model runs/demo/frozen_lake/sft \\
        --groups 64 --group-size 4 --old /tmp/ragen-old --rounds 3

What runs: :class:`ragen.trainer.starpo.StarPOTrainer` with the demo's FrozenLake
overrides (``ragen.recipes.rollout_overrides`` and ``Demo.stage_rl``: StarPO-S, the
``model=tiny`` preset, ``rollout.context_window=0``, one action per turn, up to 10
turns, compact prompts, the demo's reply format, one optimizer step per training step)
at ``--groups x --group-size`` episodes per update, from the warm start ``--model``.
``--warmup`` steps are run first and not counted (the C attention kernel's load, first
calls); then ``--steps`` steps are timed, each ``train_step`` from the seeded trainer,
so old and new train on the same seeds.

A worker (``--worker``) prints one JSON line: per step its wall seconds and the
trainer's ``timing/*`` metrics, the step's metrics, and a digest of the actor's and
critic's weights after the last step. The driver runs the old tree's worker with
``PYTHONPATH=<old tree>`` from a temporary folder (``python -m`` would put the current
directory, this checkout, first on ``sys.path`` and compare the new code with itself;
the worker is started as a script for the same reason) and the new one with this
checkout, alternating; it prints episodes/s of both and the ratio, and whether the two
trained the same numbers (same weights digest, or the largest metric difference).

``--ops N`` (without ``--old``) runs the first counted step under ``torch.profiler``
and prints its N torch ops with the most self CPU time.

``--profile`` (worker, or the driver without ``--old``) wraps the functions the step
spends its time in with timers and prints a tree of inclusive seconds per step:
rollout (env reset, prompt and context building, the engine call split into prefill,
decode steps, sampling and its own Python loop, reply reading, env steps, records,
samples) and training (filter, batch preparation, old log-probs, values, advantages,
the update split into actor and critic forward, backward and optimizer step). A timer
whose function does not exist in the tree being profiled is left out.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import hashlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

HERE = Path(__file__).resolve()
REPO = HERE.parent.parent


# --------------------------------------------------------------------------------------
# the step (runs inside the worker, against whichever ragen PYTHONPATH holds)
# --------------------------------------------------------------------------------------
def demo_overrides(args, run_dir: str) -> list[str]:
    """``ragen train`` overrides of the demo's RL stage for ``args.env`` (Demo.stage_rl),
    at ``args.groups x args.group_size`` episodes per update."""

    try:
        from ragen.recipes import BUDGETS, ENV_SHAPE, rollout_overrides
    except ImportError:  # an old tree (--old), from before the recipes left the demo
        from ragen.demo import BUDGETS, ENV_SHAPE, rollout_overrides

    # the demo's budget before the grids got their own recipes ("full" in trees that
    # predate the split)
    budget = BUDGETS.get("classic", BUDGETS["full"])
    if args.reasoning:
        budget = budget.playing(args.reasoning)
    # Demo.mini_batch_size: all StarPO-S keeps in one optimizer step
    mini = max(1, args.groups * args.group_size // 4) * ENV_SHAPE[args.env].samples_per_episode
    lr = budget.actor_lr.get(args.env)
    return [
        *rollout_overrides(args.env, budget),
        "algo=starpo-s",
        "model=tiny",
        f"model.path={args.model}",
        f"rollout.env_groups={args.groups}",
        f"rollout.group_size={args.group_size}",
        f"algo.ppo_mini_batch_size={mini}",
        *([f"model.actor_lr={lr}"] if lr else []),
        "trainer.total_steps=1000",
        "trainer.val_every=0",
        "trainer.save_every=0",
        "trainer.console=false",
        "trainer.tensorboard=false",
        f"trainer.run_dir={run_dir}",
        f"trainer.seed={args.seed}",
        *args.set,
    ]


class Timers:
    """Inclusive seconds per call path (``rollout/generate/prefill``), from wrappers."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)
        self.calls: dict[str, int] = defaultdict(int)
        self.stack: list[str] = []

    def wrap(self, owner, attr: str, label: str) -> bool:
        fn = getattr(owner, attr, None)
        if fn is None:
            return False
        timers = self

        @functools.wraps(fn)
        def timed(*a, **k):
            path = "/".join([*timers.stack, label])
            timers.stack.append(label)
            tic = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                timers.seconds[path] += time.perf_counter() - tic
                timers.calls[path] += 1
                timers.stack.pop()

        setattr(owner, attr, timed)
        return True

    def reset(self) -> None:
        self.seconds.clear()
        self.calls.clear()


def install_timers(trainer) -> Timers:
    """Timers around what a step spends its time in (see the module doc)."""
    import importlib

    import torch

    t = Timers()

    def mod(name):
        try:
            return importlib.import_module(name)
        except ImportError:
            return None

    rollout = mod("ragen.agent.rollout")
    scoring, update = mod("ragen.trainer.scoring"), mod("ragen.trainer.update")
    phase, forward = mod("ragen.trainer.rollout_phase"), mod("ragen.trainer.forward")
    advantages = mod("ragen.trainer.advantages")
    engine_cls = type(trainer.engine)
    targets = [
        (type(trainer), "rollout", "rollout"),
        (type(trainer.train_envs), "reset", "env reset"),
        (rollout, "_open_turn", "prompts+context"),
        (rollout, "_open_turns", "prompts+context"),
        (type(trainer.policy), "act", "generate"),
        (engine_cls, "_store_shared_prefix", "shared prefix"),
        (engine_cls, "_preload_prefixes", "preload"),
        (engine_cls, "_prefill", "prefill"),
        (engine_cls, "_decode_step", "decode step"),
        (engine_cls, "_sample", "sample"),
        (engine_cls, "_finish", "finish (decode text)"),
        (rollout, "_read_reply", "read reply"),
        (rollout, "_read_replies", "read reply"),
        (rollout, "_play_all", "env steps"),
        (rollout, "_record_turn", "record turn"),
        (rollout, "_build_trajectories", "samples"),
        (phase, "prepare_batch", "prepare batch"),
        (scoring, "compute_old_log_probs", "old log-probs"),
        (scoring, "compute_values", "values"),
        (advantages, "advantage_phase", "advantages"),
        (type(trainer), "_log_trajectories", "trajectory log"),
        (update, "critic_update_pass", "critic update (gives the values)"),
        (update, "ppo_update", "update"),
        (update, "actor_minibatch", "actor"),
        (update, "critic_minibatch", "critic"),
        (update, "optimizer_step", "optimizer"),
        (forward, "token_log_probs", "forward"),
        (forward, "token_values", "forward"),
        (torch.Tensor, "backward", "backward"),
    ]
    for owner, attr, label in targets:
        if owner is not None:
            t.wrap(owner, attr, label)
    return t


def weights_digest(*models) -> str:
    h = hashlib.sha256()
    for m in models:
        if m is None:
            continue
        for name, tensor in sorted(m.state_dict().items()):
            h.update(name.encode())
            h.update(tensor.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()[:16]


def worker(args) -> None:
    import torch

    torch.set_num_threads(args.threads)
    from ragen.trainer.config import load_config
    from ragen.trainer.starpo import StarPOTrainer

    with tempfile.TemporaryDirectory() as tmp:
        with contextlib.redirect_stdout(sys.stderr):  # stdout carries the JSON line only
            trainer = StarPOTrainer(load_config(demo_overrides(args, tmp + "/run")))
            timers = install_timers(trainer) if args.profile else None
            steps, ops = [], None
            try:
                for step in range(args.warmup + args.steps):
                    if timers:
                        timers.reset()
                    counted = step >= args.warmup
                    with op_profiler(args.ops if counted else 0) as prof:
                        tic, cpu = time.perf_counter(), time.process_time()
                        metrics = trainer.train_step(step)
                        wall, cpu = time.perf_counter() - tic, time.process_time() - cpu
                    if not counted:
                        continue
                    if prof is not None and ops is None:  # the first counted step's
                        ops = op_table(prof, args.ops)
                    steps.append(
                        {
                            "step": step,
                            "wall": wall,
                            "cpu": cpu,
                            "metrics": {k: float(v) for k, v in metrics.items()},
                            "profile": dict(timers.seconds) if timers else {},
                            "calls": dict(timers.calls) if timers else {},
                        }
                    )
                digest = weights_digest(trainer.actor, trainer.critic)
            finally:
                trainer.logger.close()
                trainer.close()
    episodes = args.groups * args.group_size
    print(json.dumps({"steps": steps, "digest": digest, "episodes": episodes, "ops": ops}))


@contextlib.contextmanager
def op_profiler(rows: int):
    """``torch.profiler`` over the block when ``rows`` > 0 (yields the profiler), else
    nothing (yields None). The profiler adds a few microseconds to every op, so its
    step is slower than an unprofiled one: read its table as shares, not seconds."""
    if rows <= 0:
        yield None
        return
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        yield prof


def op_table(prof, rows: int) -> str:
    """The ``rows`` torch ops with the most self CPU time in one step: where the
    arithmetic goes (``aten::mm``, ``aten::addmm``) against the elementwise and copy
    work around it, and how many calls each took."""
    return prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=rows)


# --------------------------------------------------------------------------------------
# the driver
# --------------------------------------------------------------------------------------
def run_worker(args, tree: Path, profile: bool = False) -> dict:
    """One worker process on the code of ``tree``, started from a temporary folder."""
    cmd = [sys.executable, str(HERE), "--worker", *worker_args(args)]
    if profile:
        cmd.append("--profile")
    env = {**os.environ, "PYTHONPATH": str(tree), "OMP_NUM_THREADS": str(args.threads)}
    with tempfile.TemporaryDirectory() as cwd:
        out = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
    if out.returncode != 0:
        sys.stderr.write(out.stderr[-4000:])
        raise SystemExit(f"the worker on {tree} failed (exit {out.returncode})")
    return json.loads(out.stdout.strip().splitlines()[-1])


def _model_arg(model: str) -> str:
    """A local folder or file as an absolute path (the worker runs in another checkout);
    a name (``tiny:nano``, a hub id) as it is."""
    path = Path(model).expanduser()
    return str(path.resolve()) if path.exists() else model


def worker_args(args) -> list[str]:
    out = [
        "--model",
        _model_arg(args.model),
        "--env",
        args.env,
        "--groups",
        str(args.groups),
        "--group-size",
        str(args.group_size),
        "--steps",
        str(args.steps),
        "--warmup",
        str(args.warmup),
        "--seed",
        str(args.seed),
        "--threads",
        str(args.threads),
    ]
    if args.reasoning:
        out += ["--reasoning", args.reasoning]
    if args.ops:
        out += ["--ops", str(args.ops)]
    for s in args.set:
        out += ["--set", s]
    return out


PHASES = ("rollout", "reasoning_stats", "prepare", "old_log_prob", "advantage", "update")


def summarize(result: dict) -> dict[str, float]:
    """Median over counted steps of wall seconds and each trainer phase."""
    steps = result["steps"]
    out = {"wall": statistics.median(s["wall"] for s in steps)}
    out["cpu"] = statistics.median(s.get("cpu", float("nan")) for s in steps)
    for phase in PHASES:
        vals = [s["metrics"].get(f"timing/{phase}", 0.0) for s in steps]
        out[phase] = statistics.median(vals)
    out["episodes_per_s"] = result["episodes"] / out["wall"]
    out["episodes_per_cpu_s"] = result["episodes"] / out["cpu"]
    return out


def print_profile(result: dict, title: str) -> None:
    steps = result["steps"]
    paths = sorted({p for s in steps for p in s["profile"]})
    wall = statistics.median(s["wall"] for s in steps)
    print(f"\n{title}: {result['episodes']} episodes, median step {wall:.2f} s")
    print(f"{'seconds':>9} {'share':>6} {'calls':>7}  where")
    for path in paths:
        sec = statistics.median(s["profile"].get(path, 0.0) for s in steps)
        calls = statistics.median(s["calls"].get(path, 0) for s in steps)
        depth = path.count("/")
        name = path.rsplit("/", 1)[-1]
        print(f"{sec:9.3f} {sec / wall:6.1%} {calls:7.0f}  {'  ' * depth}{name}")
    m = steps[-1]["metrics"]
    keys = ("rollout/num_turns", "rollout/success", "perf/num_trained_samples")
    print("  " + ", ".join(f"{k}={m[k]:.3g}" for k in keys if k in m))


def compare_metrics(old: dict, new: dict) -> tuple[float, str]:
    """Largest |old - new| over the metrics both report (timing and perf excluded)."""
    worst, where = 0.0, ""
    for so, sn in zip(old["steps"], new["steps"]):
        for k, v in so["metrics"].items():
            if k.startswith(("timing/", "perf/")) or k not in sn["metrics"]:
                continue
            d = abs(v - sn["metrics"][k])
            if d > worst or (d != d):
                worst, where = d, f"{k} (step {so['step']})"
    return worst, where


#: ``--preset`` settings: the SmolLM2 CPU presets' RL (experiments/grids/configs/
#: smollm2-cpu-sk.yaml: Dr.GRPO, lr 1e-5, minibatches of 32, 16 new tokens, one-move
#: replies, bf16 autocast where the CPU has it, a fixed micro-batch budget) on Sokoban
PRESETS = {
    "smollm2-cpu": {
        "env": "sokoban",
        "reasoning": "no_think",
        "set": [
            "model=smollm2",
            "algo=drgrpo",
            "algo.ppo_mini_batch_size=32",
            "model.actor_lr=1e-5",
            "rollout.max_new_tokens=16",
            "algo.micro_token_budget=4096",
            "trainer.bf16_cpu=true",
        ],
    },
}


def apply_preset(args) -> None:
    """``--preset NAME``: its env, reply format and overrides (``--set`` ones after)."""
    if not args.preset:
        return
    preset = PRESETS[args.preset]
    args.env, args.reasoning = preset["env"], preset["reasoning"]
    args.set = [*preset["set"], *args.set]


def write_results(path: str, args, runs: dict[str, list[dict]], med: dict) -> None:
    """The comparison as JSON: settings, every process's summary, the medians, the ratio."""
    from experiments.common import provenance

    out = {
        "bench": "bench.bench_rl_step",
        "preset": args.preset,
        "env": args.env,
        "episodes_per_step": args.groups * args.group_size,
        "groups": args.groups,
        "group_size": args.group_size,
        "threads": args.threads,
        "overrides": args.set,
        "old_tree": str(args.old),
        "runs": {name: [summarize(r) for r in results] for name, results in runs.items()},
        "median": med,
        "new_over_old_episodes_per_s": med["new"]["episodes_per_s"] / med["old"]["episodes_per_s"],
        "provenance": provenance("python -m bench.bench_rl_step " + " ".join(sys.argv[1:])),
    }
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps(out, indent=1) + "\n")
    print(f"wrote {path}")


def driver(args) -> None:
    new_tree = REPO
    if args.old is None:
        tree = Path(args.tree).resolve() if args.tree else new_tree
        result = run_worker(args, tree, profile=args.profile)
        s = summarize(result)
        print(f"{tree}: {s['episodes_per_s']:.2f} episodes/s, step {s['wall']:.2f} s")
        print("  " + ", ".join(f"{p} {s[p]:.2f}" for p in PHASES))
        if args.profile:
            print_profile(result, str(tree))
        if result.get("ops"):
            print(f"\ntorch ops of the first counted step (--ops {args.ops}):\n{result['ops']}")
        return
    old_tree = Path(args.old).resolve()
    print(
        f"{args.groups}x{args.group_size} episodes per update, {args.steps} counted step(s) "
        f"after {args.warmup} per process, {args.rounds} round(s), alternating old/new"
    )
    runs: dict[str, list[dict]] = {"old": [], "new": []}
    for r in range(args.rounds):
        order = (("old", old_tree), ("new", new_tree))
        if r % 2:
            order = order[::-1]  # old first, then new first: drift hits both alike
        for name, tree in order:
            res = run_worker(args, tree)
            runs[name].append(res)
            s = summarize(res)
            print(
                f"round {r + 1} {name}: step {s['wall']:.2f} s ({s['cpu']:.2f} CPU s), "
                f"{s['episodes_per_s']:.2f} episodes/s ("
                + ", ".join(f"{p} {s[p]:.2f}" for p in PHASES)
                + ")",
                flush=True,
            )
    med = {
        name: {
            k: statistics.median(summarize(res)[k] for res in results)
            for k in ("wall", "cpu", "episodes_per_s", "episodes_per_cpu_s", *PHASES)
        }
        for name, results in runs.items()
    }
    print(f"\n{'phase (median)':<16} {'old s':>8} {'new s':>8} {'old/new':>8}")
    for k in ("wall", "cpu", *PHASES):
        o, n = med["old"][k], med["new"][k]
        print(f"{k:<16} {o:8.2f} {n:8.2f} {o / n if n else float('inf'):8.2f}x")
    for key, what in (("episodes_per_s", "episodes/s"), ("episodes_per_cpu_s", "per CPU s")):
        pairs = [summarize(n)[key] / summarize(o)[key] for o, n in zip(runs["old"], runs["new"])]
        ratio = med["new"][key] / med["old"][key]
        print(
            f"{what}: old {med['old'][key]:.2f}, new {med['new'][key]:.2f}: new/old "
            f"{ratio:.2f}x (pairs: " + ", ".join(f"{p:.2f}" for p in pairs) + ")"
        )
    if args.out:
        write_results(args.out, args, runs, med)
    same = runs["old"][0]["digest"] == runs["new"][0]["digest"]
    worst, where = compare_metrics(runs["old"][0], runs["new"][0])
    print(
        f"weights after the counted steps: {'identical' if same else 'differ'} "
        f"(old {runs['old'][0]['digest']}, new {runs['new'][0]['digest']}); largest metric "
        f"difference {worst:.3g}{' at ' + where if where else ''}"
    )


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", required=True, help="the warm start (a demo sft folder)")
    p.add_argument("--env", default="frozen_lake")
    p.add_argument("--groups", type=int, default=64)
    p.add_argument("--group-size", type=int, default=4)
    p.add_argument("--steps", type=int, default=1, help="counted steps per process")
    p.add_argument("--warmup", type=int, default=1, help="uncounted steps first")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--reasoning", default=None, help="reply format (default: the demo's)")
    p.add_argument("--set", action="append", default=[], help="more KEY=VALUE overrides")
    p.add_argument("--old", default=None, help="a checkout of the old code to compare with")
    p.add_argument("--tree", default=None, help="without --old: profile this checkout instead")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--profile", action="store_true", help="time the step's parts")
    p.add_argument(
        "--ops", type=int, default=0, help="without --old: print the N torch ops with the "
        "most self CPU time in the first counted step (torch.profiler)",
    )  # fmt: skip
    p.add_argument("--preset", choices=sorted(PRESETS), default=None, help="a model's settings")
    p.add_argument("--out", default=None, help="with --old: write the comparison as JSON here")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if not args.worker:
        apply_preset(args)  # the worker gets the expanded settings as flags
    (worker if args.worker else driver)(args)


if __name__ == "__main__":
    main()
