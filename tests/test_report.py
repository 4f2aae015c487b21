"""The docs' figures are their results files' (``python -m experiments.report``).

README.md, docs/RESULTS.md, docs/FINDINGS.md and experiments/findings/results.md hold
generated blocks; these tests fail when a page differs from what its committed results
files give (the fix: run ``python -m experiments.report`` and commit the pages), check
that the check notices a changed figure, and pin the pieces the figures rest on: the
interval a gain gets from the data it has, the verdict rule, the markers, and the demo's
blocks on a synthetic demo-over-seeds file (``tests/fixtures/demo_seeds_default.json``).
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from experiments.report import blocks, demo, markers
from experiments.report.gains import SeedGain, pool
from experiments.report.verdicts import (
    CONTRADICTED,
    INCONCLUSIVE,
    NOT_SHOWN,
    PARTLY,
    REPRODUCED,
    Part,
    finding_verdict,
)
from ragen.stats import Interval, stratified_paired_bootstrap

FIXTURE = Path(__file__).parent / "fixtures" / "demo_seeds_default.json"


def test_the_docs_match_their_results_files():
    stale = blocks.check()
    assert not stale, (
        "a page differs from its results files; run `python -m experiments.report` and "
        "commit the pages:\n" + "\n".join(stale)
    )


def test_a_figure_changed_by_hand_fails_the_check():
    text = (blocks.sources.ROOT / "docs" / "RESULTS.md").read_text()
    body = next(b for b in markers.find_blocks(text) if re.search(r"\d", text[b.start : b.end]))
    digit = re.search(r"\d", text[body.start : body.end]).start() + body.start
    changed = text[:digit] + str((int(text[digit]) + 1) % 10) + text[digit + 1 :]
    assert blocks.rebuild(changed) != changed
    assert blocks.rebuild(text) == text


def test_markers_pair_up_and_keep_the_prose():
    page = "intro\n<!-- generated:x a=1 -->\nold\n<!-- /generated -->\nmid <!-- generated:y -->2<!-- /generated -->.\n"
    out = markers.fill(page, lambda b: f"{b.name} {b.options}")
    assert (
        out
        == "intro\n<!-- generated:x a=1 -->\nx {'a': '1'}\n<!-- /generated -->\nmid <!-- generated:y -->y {}<!-- /generated -->.\n"
    )
    with pytest.raises(markers.MarkerError):
        markers.find_blocks("<!-- generated:x -->\nno close\n")
    assert markers.find_blocks("between `<!-- generated:... -->` markers") == []


def test_a_gain_gets_the_interval_its_data_allow():
    per_state = SeedGain("0", 0.5, 0.75, 4, (0.0, 1.0, 0.0, 0.0))
    assert pool([per_state]).interval.method == "paired bootstrap"
    rates = [SeedGain(str(s), 0.5, 0.5 + d, 512) for s, d in enumerate((0.02, 0.05, 0.08))]
    g = pool(rates)
    assert g.interval.method == "seed t" and "seed t, 3 seeds" in g.text()
    one = pool(rates[:1])
    assert one.interval is None and "one seed, noise ±" in one.text()
    # a seed's gain without per-state outcomes is beyond noise only past its cells' noise
    assert not SeedGain("0", 0.635, 0.650, 512).beyond_noise
    assert SeedGain("1", 0.451, 0.646, 512).beyond_noise


def _part(low: float, high: float, units: int = 3, **kw) -> Part:
    return Part(
        "claim", "measure", Interval((low + high) / 2, low, high, units, "seed t"), units, **kw
    )


def test_the_verdict_rule():
    assert _part(1, 9).verdict == REPRODUCED
    assert _part(-9, -1).verdict == CONTRADICTED
    assert _part(-2, 3).verdict == NOT_SHOWN  # holds 0, below the 5 points that matter
    assert _part(-2, 9).verdict == INCONCLUSIVE  # holds both 0 and 5
    assert _part(1, 9, units=1).verdict == INCONCLUSIVE  # one event or seed
    assert _part(1, 9, setup_ok=False).verdict == INCONCLUSIVE
    assert finding_verdict([_part(1, 9), _part(1, 9)]) == REPRODUCED
    assert finding_verdict([_part(1, 9), _part(-2, 9)]) == PARTLY
    assert finding_verdict([_part(-9, -1), _part(-2, 3)]) == CONTRADICTED
    assert finding_verdict([_part(-2, 9), _part(1, 9, units=1)]) == INCONCLUSIVE
    assert finding_verdict([_part(-2, 3), _part(-2, 9)]) == NOT_SHOWN


def test_the_demo_blocks_from_a_demo_over_seeds_file(tmp_path):
    assert "Not measured yet" in demo.readme_table(tmp_path)
    folder = tmp_path / "experiments" / "demo_seeds" / "results"
    folder.mkdir(parents=True)
    shutil.copy(FIXTURE, folder / "default.json")
    table = demo.readme_table(tmp_path)
    data = blocks.sources.load("experiments/demo_seeds/results/default.json", tmp_path)
    diffs = [[a - b for a, b in zip(data["runs"][s]["sokoban"]["after RL"]["per_state"],
                                    data["runs"][s]["sokoban"]["warm start (SFT)"]["per_state"])]
             for s in ("0", "1", "2")]  # fmt: skip
    pooled = stratified_paired_bootstrap(diffs).points().format()
    row = next(line for line in table.splitlines() if line.startswith("| Sokoban"))
    assert pooled in row and "stratified paired bootstrap, 3 seeds x 32 states" in row
    full = demo.results_tables(tmp_path)
    assert full.count("| Sokoban |") == 4  # three seeds and the pooled row
    assert "seed 2 20.0 min" in full and "17 to 20 minutes" in demo.wall_time(tmp_path)


def test_the_temperature_table_pairs_each_step_with_the_warm_start(monkeypatch):
    """``grid-temps``: a step's gain at each temperature is paired state by state against
    the warm start at that same temperature; a step without per-state outcomes shows -."""
    from experiments.report import grids

    def evaluation(outcomes, at_one=None):
        record = {"success_rate": sum(outcomes) / len(outcomes), "per_state": outcomes}
        if at_one is not None:
            record["at_temperature"] = {"1.0": evaluation(at_one)}
        return record

    half, quarter = [0.0] * 10 + [1.0] * 10, [0.0] * 15 + [1.0] * 5  # 20 states
    warm = evaluation(half, at_one=quarter)
    study = {
        "config": {"eval_temperature": 0.5, "extra_eval_temperatures": [1.0]},
        "sokoban": {
            "0": {
                "warm": warm,
                "control": {
                    "evals_by_step": {
                        "20": evaluation([1.0] * 20, at_one=quarter),
                        "10": {"success_rate": 0.5},
                    }
                },
            }
        },
    }
    monkeypatch.setattr(grids, "data", lambda stem: study)
    monkeypatch.setattr(grids.sources, "provenance_line", lambda paths: "")
    table = grids.temps_table(["levers"])
    rows = [line for line in table.splitlines() if line.startswith("| sokoban")]
    assert [r.split(" | ")[3] for r in rows] == ["10", "20"]  # by step, as numbers
    assert rows[0].endswith("| - | - |")
    assert "50.0% -> 100.0%: +50.0 [" in rows[1]  # +10 of 20 states at temperature 0.5
    assert "(above 0)" in rows[1]  # every resample gains
    assert "25.0% -> 25.0%: +0.0 [+0.0, +0.0] (holds 0)" in rows[1]  # unchanged at 1.0
    assert "temperature 1.0" in table.splitlines()[0]
