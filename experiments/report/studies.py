"""Blocks of the single studies that write one JSON file with their provenance
(``--json``): the FrozenLake oracles and Sokoban's ties."""

from __future__ import annotations

from experiments.report import sources
from experiments.report.gains import pct
from ragen.stats import binomial_half_width

LAKE = "experiments/lake_oracles/results/lake_oracles.json"
TIES = "experiments/sokoban_ties/results/sokoban_ties.json"
ORACLES = {
    "ever": "`ever` (the old oracle, `oracle_gamma=1`)",
    "discounted": "`discounted` (maximizes `E[0.9^T 1(goal)]`, the default)",
    "finite": "`finite` (the optimum of a finite episode)",
    "shortest": "`shortest` (first move of a shortest hole-free path, ignoring slips)",
    "random": "random",
}


def lake_oracles() -> str:
    """Each FrozenLake policy's success within the horizon, clean and with 10% random
    moves (the SFT data's noise), with the binomial noise of a cell."""
    d = sources.load(LAKE)
    n, rows = d["maps"], []
    for key, label in ORACLES.items():
        clean, noisy = d["success"][f"{key} eps=0.0"], d["success"][f"{key} eps=0.1"]
        rows.append(f"| {label} | {pct(clean)} | {pct(noisy)} |")
    h = 100 * binomial_half_width(0.5, n)
    head = [
        f"| policy ({n:,} maps, p = {d['p']}) | success within {d['horizon']} steps | "
        "with 10% random moves (the SFT data) |",
        "|---|---|---|",
    ]
    note = f"Each cell ±{h:.1f} points at most (95% binomial). From `{LAKE}`: {sources.describe(LAKE)}."
    return "\n".join(head + rows) + "\n\n" + note


def sokoban_ties() -> str:
    """How many of the states the SFT data visits have more than one optimal move."""
    d = sources.load(TIES)
    total, counts = d["states"], d["optimal_moves"]
    share = ", ".join(f"{pct(c / total)} with {k}" for k, c in sorted(counts.items()))
    return (
        f"{total} states visited in {d['rooms']} rooms (epsilon {d['epsilon']}): {share} "
        f"optimal move(s). From `{TIES}`: {sources.describe(TIES)}."
    )
