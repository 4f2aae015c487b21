"""docs/SPEED.md's old-against-new tables from ``bench.bench_rl_step --out`` files
(``bench/results/rl_step_*.json``): per file the medians of each phase, old and new, their
ratio, and each old/new pair's ratio of episodes per second."""

from __future__ import annotations

from experiments.report import sources
from experiments.report.tables import markdown_table

PHASES = ("wall", "rollout", "reasoning_stats", "old_log_prob", "update")


def rl_step_table(args: list[str]) -> str:
    """``bench-rl-step FILE ...``: one table row per phase and file (paths relative to
    ``bench/results``)."""
    rows, notes = [], []
    for name in args:
        rel = f"bench/results/{name}"
        d = sources.load(rel)
        old, new = d["median"]["old"], d["median"]["new"]
        episodes = d["episodes_per_step"]
        pairs = [n["episodes_per_s"] / o["episodes_per_s"] for o, n in zip(d["runs"]["old"], d["runs"]["new"])]  # fmt: skip
        for phase in PHASES:
            o, n = old.get(phase, 0.0), new.get(phase, 0.0)
            ratio = f"{o / n:.2f}x" if n else "-"
            label = "whole step" if phase == "wall" else phase.replace("_", " ")
            rows.append([str(episodes), label, f"{o:.1f}", f"{n:.1f}", ratio])
        rows.append([str(episodes), "**episodes per second**", f"{old['episodes_per_s']:.3f}",
                     f"{new['episodes_per_s']:.3f}",
                     f"**{d['new_over_old_episodes_per_s']:.2f}x** (pairs "
                     + ", ".join(f"{p:.2f}" for p in pairs) + ")"])  # fmt: skip
        notes.append(f"* `{rel}`: {sources.describe(rel)}")
    head = ["episodes a step", "phase (median seconds)", "old", "new", "old / new"]
    table = markdown_table(head, rows)
    return table + "\n\n" + "\n".join(notes)


def eval_table(args: list[str]) -> str:
    """``bench-eval FILE``: ``ragen eval``'s generated tokens per second per checkout
    (medians over the rounds), each older one's ratio to this checkout, and each round's
    ratio (path relative to ``bench/results``)."""
    rel = f"bench/results/{args[0]}"
    d = sources.load(rel)
    med, runs = d["median"], d["runs"]
    head = ["code", "tokens/s (median)", "wall s (median)", "reply tokens", "new / this"]
    rows = [["this checkout (new)", f"{med['new']['tokens_per_s']:.0f}",
             f"{med['new']['wall']:.1f}", f"{med['new']['response_length']:.1f}", "-"]]  # fmt: skip
    for name, ratio in d["ratios"].items():
        rounds = ", ".join(f"{p:.2f}" for p in ratio["pairs"])
        rows.append([f"`{name}`", f"{med[name]['tokens_per_s']:.0f}", f"{med[name]['wall']:.1f}",
                     f"{med[name]['response_length']:.1f}",
                     f"**{ratio['new_over_old_tokens_per_s']:.2f}x** (rounds {rounds})"])  # fmt: skip
    table = markdown_table(head, rows)
    rounds = len(runs["new"])
    return (f"{table}\n\n{rounds} rounds, {d['threads']} threads a process, `ragen eval "
            f"{' '.join(d['eval_args'])}` on {d['model']}.\n\n* `{rel}`: {sources.describe(rel)}")  # fmt: skip
