"""Run every benchmark in turn (``make bench``); each prints its own table.

.venv/bin/python -m bench.run_all              # every benchmark, small sizes (minutes)
.venv/bin/python -m bench.run_all envs gae     # those whose module name contains a word
.venv/bin/python -m bench.run_all --full       # the sizes the docs' figures were measured at

bench/ holds speed and scale benchmarks; the research studies (does RL add, the echo
trap, reasoning formats, ...) are under ``experiments/``. By default each benchmark runs
with the small arguments of :data:`QUICK`, so ``make bench`` checks that all of them run
(on a 2-core CPU, in minutes); ``--full`` runs each with its own defaults, the sizes in
its docstring and in the docs. A benchmark whose optional dependency is missing (TRL for
``bench_vs_trl``) says so and exits 0.
"""

from __future__ import annotations

import argparse
import pkgutil
import subprocess
import sys
import time
from pathlib import Path

# small arguments per benchmark: every code path, a fraction of the work
QUICK: dict[str, list[str]] = {
    name: args.split()
    for name, args in {
        "bench_advantages": "--batch 16 --seq 512 --repeats 1",
        "bench_env_suite": "--quick",
        "bench_envs": "--quick",
        "bench_eval": "--rounds 1",
        "bench_generate": "--size nano --batch 4 --prompt-len 32 --new 8 --repeats 1",
        "bench_logprobs": "--batch 4 --repeats 1",
        "bench_lora": "--model tiny:nano --steps 1",
        "bench_reasoning_gym": "--seeds 2 --tasks basic_arithmetic gcd",
        "bench_reasoning_stats": "--samples 4 --rounds 1",
        # an untrained tiny model stands for a warm start: the same code paths
        "bench_rl_step": "--model tiny:nano --groups 4 --group-size 2 --warmup 0 --rounds 1",
        "bench_rollout": "--size nano --groups 2 --group-size 2 --turns 2 --max-new-tokens 8",
        "bench_scaling": "--rounds 1 --groups 4",
        "bench_sft_packing": "--episodes 8 --steps 3",
        "bench_sharding": "--size nano --ranks 1 2 --steps 1 --ray-steps 1",
        "bench_training_attention": "--model tiny:nano --groups 2 --group-size 4 --rounds 2",
        # grpo: no filter, so 8 x 4 episodes fill the tiny preset's minibatch of 32
        "bench_trainer": "--steps 1 --size nano --algo grpo --groups 8 --group-size 4 --threads 1",
        "bench_viewer": "--steps 5 --episodes 16",
        "bench_vs_trl": "--steps 1 --prompts 2 --group-size 2",
        "bench_worlds": "--episodes 2",
        "trainer_checkpoint_io": "--hidden 64 --layers 2 --vocab 1000",
    }.items()
}


def benchmarks() -> list[str]:
    """The benchmark modules of this folder (``bench_*`` and ``*_io``)."""
    here = Path(__file__).parent
    return sorted(
        m.name
        for m in pkgutil.iter_modules([str(here)])
        if m.name.startswith("bench_") or m.name.endswith("_io")
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("words", nargs="*", help="run only the benchmarks whose name has a word")
    p.add_argument("--full", action="store_true", help="each benchmark's own (docs') sizes")
    args = p.parse_args(argv)
    names = [n for n in benchmarks() if not args.words or any(w in n for w in args.words)]
    missing = [n for n in names if n not in QUICK]
    if missing and not args.full:  # a new benchmark must say how it runs small
        print(f"no QUICK arguments for {', '.join(missing)}: add them to bench/run_all.py")
        return 1
    failed = []
    for name in names:
        extra = [] if args.full else QUICK[name]
        print(f"\n=== bench.{name} {' '.join(extra)} ===", flush=True)
        tic = time.perf_counter()
        code = subprocess.call(
            [sys.executable, "-m", f"bench.{name}", *extra], cwd=Path(__file__).parent.parent
        )
        print(f"=== bench.{name}: exit {code} after {time.perf_counter() - tic:.0f} s", flush=True)
        if code:
            failed.append(name)
    if failed:
        print(f"failed: {', '.join(failed)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
