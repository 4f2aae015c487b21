"""The pages with generated blocks, the block names they may use, and the rebuild.

A page names a block ``<!-- generated:NAME ARGS -->`` (:mod:`.markers`); :data:`BLOCKS`
maps each NAME to its renderer, a function of the block's arguments and of the
repository root (the demo's renderers read the root given, so a test can point them at
a fixture; every other renderer reads the committed files).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from experiments.report import demo, findings, grids, markers, sources, speed, studies, summary
from experiments.report.verdicts import rule_text

#: the pages that hold generated blocks, relative to the repository root
PAGES = (
    "README.md",
    "docs/RESULTS.md",
    "docs/FINDINGS.md",
    "experiments/findings/results.md",
    "experiments/demo_seeds/results.md",
    "docs/SPEED.md",
)

Renderer = Callable[[markers.Block, Path], str]


def _one(fn: Callable[[], str]) -> Renderer:
    return lambda block, root: fn()


def _demo(fn: Callable[[Path], str]) -> Renderer:
    return lambda block, root: fn(root)


def _args(fn: Callable[[list[str]], str]) -> Renderer:
    return lambda block, root: fn(list(block.args))


def _finding(fn: Callable[[str], str]) -> Renderer:
    return lambda block, root: fn(block.positional[0])


def repeat_check() -> str:
    """How many ``actor/`` metrics of one SmolLM2 RL step repeat exactly at one micro-batch
    budget and how many part at another (``experiments.grids.repeat_check``'s table)."""
    rel = "experiments/grids/results/smollm2-cpu-sk-repeat-check.md"
    rows = [line.split(" | ") for line in sources.text(rel).splitlines()[1:] if " | " in line]
    same = sum(1 for r in rows if r[1] == r[2])
    parted = [r[0] for r in rows if r[1] != r[3]]
    grad = next(r for r in rows if r[0] == "actor/grad_norm_mean")
    head = sources.text(rel).splitlines()[0].split(" | ")
    return (f"{same} of {len(rows)} `actor/` metrics equal to the last digit when the step runs "
            f"twice at {head[1]}; at {head[3]}, {len(parted)} differ (`actor/grad_norm_mean` "
            f"{float(grad[1]):.4f} against {float(grad[3]):.4f}). From `{rel}`: {sources.describe(rel)}.")  # fmt: skip


BLOCKS: dict[str, Renderer] = {
    "results-summary": _one(summary.results_summary),
    "noise": _one(summary.noise_sentence),
    "readme-smollm2": _one(summary.readme_smollm2),
    "demo-readme": _demo(demo.readme_table),
    "demo-results": _demo(demo.results_tables),
    "demo-wall": _demo(demo.wall_time),
    "demo-sokoban-steps": _demo(demo.sokoban_steps),
    "demo-sokoban-extra-epochs": _demo(demo.sokoban_extra_epochs),
    "demo-fit-floor": _demo(demo.fit_floor),
    "grid-table": _args(grids.rl_table),
    "grid-steps": _args(grids.steps_table),
    "grid-warm": _args(grids.warm_table),
    "grid-runs": _args(grids.run_table),
    "grid-evals": _args(grids.eval_table),
    "grid-temps": _args(grids.temps_table),
    "repeat-check": _one(repeat_check),
    "bench-rl-step": _args(speed.rl_step_table),
    "bench-eval": _args(speed.eval_table),
    "lake-oracles": _one(studies.lake_oracles),
    "sokoban-ties": _one(studies.sokoban_ties),
    "verdict-rule": _one(rule_text),
    "findings-summary": _one(findings.summary_block),
    "finding-table": _finding(findings.table_block),
    "finding-verdict": _finding(findings.verdict_block),
    "findings-noise": _one(findings.noise_sentence),
    "findings-index": _one(findings.results_index),
}


def render(block: markers.Block, root: Path = sources.ROOT) -> str:
    if block.name not in BLOCKS:
        raise KeyError(
            f"unknown generated block {block.name!r} (known: {', '.join(sorted(BLOCKS))})"
        )
    return BLOCKS[block.name](block, root)


def rebuild(text: str, root: Path = sources.ROOT) -> str:
    """A page's text with every block rendered from the results files."""
    return markers.fill(text, lambda block: render(block, root))


def check(root: Path = sources.ROOT, pages: tuple[str, ...] = PAGES) -> list[str]:
    """The pages that differ from what their results files give, each with its diff."""
    out = []
    for page in pages:
        old = (root / page).read_text()
        new = rebuild(old, root)
        if new != old:
            out.append(markers.diff(old, new, page))
    return out
