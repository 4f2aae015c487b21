"""``ragen eval``'s generated tokens per second, this checkout against older ones.

Each tree's ``ragen eval`` runs in a fresh process, the trees taking turns round by
round (the order reversed every other round, so drift in the machine's load hits all
alike); the figure is each tree's median over the rounds and its ratio to this
checkout's, and each round's ratio beside it::

    git worktree add /tmp/ragen-fbda83a fbda83a
    .venv/bin/python -m bench.bench_eval --tree fbda83a=/tmp/ragen-fbda83a --rounds 3 \\
        --out bench/results/eval_tiny_sokoban.json

What runs: ``python -m ragen.cli eval`` from each tree's folder (so that tree's
``ragen`` is imported), all on one model folder (``--model``, or an untrained
``tiny:nano`` this checkout builds), with the budget pinned by flags every tree
accepts (default: 128 Sokoban episodes, 5 turns of up to 5 actions, 10 per episode,
48 new tokens a turn, temperature 1, full prompts, seed 0; ``--eval-args`` replaces
them). The figure is the ``generated tokens/s`` line ``ragen eval`` prints (generated
tokens over the eval's wall time, env steps included); the process's wall time, the
mean reply length and the success rate are kept beside it, so that a tree that played
a different game is seen at once.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

DEFAULT_EVAL_ARGS = (
    "--env sokoban --n 128 --max-new-tokens 48 --temperature 1 --max-turns 5 "
    "--max-actions-per-turn 5 --max-actions-per-trajectory 10 --prompt-style full --seed 0"
)

# the lines of ``ragen eval``'s table this bench reads, by the key they are kept under
TABLE_LINES = {
    "tokens_per_s": "generated tokens/s",
    "response_length": "response length (tokens)",
    "success_rate": "success rate",
    "mean_turns": "mean turns",
}


def parse_table(text: str) -> dict[str, float]:
    """The numbers of ``ragen eval``'s printed table that :data:`TABLE_LINES` names."""
    found = {}
    for key, label in TABLE_LINES.items():
        m = re.search(rf"^{re.escape(label)}\s+(-?[0-9.]+)%?\s*$", text, re.MULTILINE)
        if m:
            found[key] = float(m.group(1))
    if "tokens_per_s" not in found:
        raise RuntimeError(
            f"no '{TABLE_LINES['tokens_per_s']}' line in the eval's output:\n{text[-2000:]}"
        )
    return found


def run_eval(tree: Path, model: str, eval_args: list[str], threads: int) -> dict[str, float]:
    """One ``ragen eval`` of ``tree``'s code in a fresh process: its table and wall time."""
    env = {**os.environ, "PYTHONPATH": str(tree), "OMP_NUM_THREADS": str(threads),
           "MKL_NUM_THREADS": str(threads), "RAGEN_PROGRESS": "0"}  # fmt: skip
    cmd = [sys.executable, "-m", "ragen.cli", "eval", "--model", model, *eval_args]
    tic = time.perf_counter()
    done = subprocess.run(cmd, cwd=tree, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - tic
    if done.returncode != 0:
        raise RuntimeError(f"{tree}: `{' '.join(cmd)}` failed:\n{done.stderr[-2000:]}")
    return {**parse_table(done.stdout), "wall": wall}


def tiny_model(folder: Path) -> str:
    """An untrained tiny:nano model folder built by this checkout's ``ragen``."""
    from ragen.models.tiny import create_tiny

    return str(create_tiny(folder, size="nano", seed=0))


def summarize(runs: dict[str, list[dict]]) -> dict[str, dict[str, float]]:
    return {
        name: {k: statistics.median(r[k] for r in rs) for k in rs[0]} for name, rs in runs.items()
    }


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tree", action="append", default=[], metavar="NAME=PATH",
                   help="an older checkout to compare with (repeat for several)")  # fmt: skip
    p.add_argument("--model", default=None, help="model folder (default: untrained tiny:nano)")
    p.add_argument("--eval-args", default=DEFAULT_EVAL_ARGS, help="ragen eval's flags")
    p.add_argument("--threads", type=int, default=2, help="OMP_NUM_THREADS of each process")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--out", default=None, help="write the comparison as JSON here")
    args = p.parse_args(argv)

    trees = {"new": REPO}
    for item in args.tree:
        name, sep, path = item.partition("=")
        if not sep or not Path(path, "ragen").is_dir():
            p.error(f"--tree {item!r}: expected NAME=PATH of a ragen checkout")
        trees[name] = Path(path).resolve()
    eval_args = args.eval_args.split()
    with tempfile.TemporaryDirectory() as tmp:
        model = args.model or tiny_model(Path(tmp) / "tiny-nano")
        runs: dict[str, list[dict]] = {name: [] for name in trees}
        for r in range(args.rounds):
            order = list(trees.items())
            for name, tree in order[::-1] if r % 2 else order:
                res = run_eval(tree, model, eval_args, args.threads)
                runs[name].append(res)
                print(f"round {r + 1} {name}: {res['tokens_per_s']:.1f} tokens/s, "
                      f"wall {res['wall']:.1f} s, reply {res.get('response_length', 0):.1f} "
                      f"tokens", flush=True)  # fmt: skip
    med = summarize(runs)
    ratios = {}
    for name in trees:
        if name == "new":
            continue
        pairs = [n["tokens_per_s"] / o["tokens_per_s"] for o, n in zip(runs[name], runs["new"])]
        ratios[name] = {
            "new_over_old_tokens_per_s": med["new"]["tokens_per_s"] / med[name]["tokens_per_s"],
            "pairs": pairs,
        }
        print(f"new / {name}: {ratios[name]['new_over_old_tokens_per_s']:.2f}x tokens/s "
              "(rounds: " + ", ".join(f"{x:.2f}" for x in pairs) + ")")  # fmt: skip
    if args.out:
        from experiments.common import provenance

        out = {
            "bench": "bench.bench_eval",
            "eval_args": eval_args,
            "model": args.model or "untrained tiny:nano (seed 0)",
            "threads": args.threads,
            "trees": {name: str(tree) for name, tree in trees.items()},
            "runs": runs,
            "median": med,
            "ratios": ratios,
            "provenance": provenance("python -m bench.bench_eval " + " ".join(sys.argv[1:])),
        }
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(out, indent=1) + "\n")
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
