"""experiments/findings: every finding's sweep builds valid runs, the collapse study
chooses thresholds on seeds it does not score, and one command writes figure and table."""

import json
import math

import pytest

from experiments.findings import prediction, sweep
from experiments.findings.config import finding_names, load_finding
from experiments.findings.plots import plot_sweep, seed_band
from ragen.errors import ConfigError
from ragen.trainer.config import load_config


@pytest.mark.parametrize("name", finding_names())
def test_every_variant_of_every_budget_is_a_valid_training_run(name, tmp_path):
    cfg = load_finding(name)
    for budget in [None, *cfg.budgets]:
        c = load_finding(name, budget, ["device=cpu"])  # this machine may have no GPU
        for vname, variant in c.variants.items():
            seed = sweep.all_seeds(c)[-1]
            warm = sweep.warm_dir(tmp_path, c, variant, seed)
            run = sweep.run_dir(tmp_path, vname, seed)
            items = sweep.train_overrides(c, variant, seed, warm, run)
            train = load_config(items)  # the run the sweep would start
            assert train.trainer.total_steps == c.steps and train.trainer.seed == seed
            assert train.model.path == str(warm)
            # one optimizer step per training step: the minibatch holds all that is kept
            assert train.algo.ppo_mini_batch_size == sweep.max_kept_samples(c, train)


def test_warm_starts_are_shared_exactly_when_sft_sees_the_same_things(tmp_path):
    cfg = load_finding("reasoning")
    v = cfg.variants
    assert sweep.warm_dir(tmp_path, cfg, v["gwm"], 0) == sweep.warm_dir(
        tmp_path, cfg, v["gwm-rewarded"], 0
    )  # the rewards are RL's business: one warm start
    assert sweep.warm_dir(tmp_path, cfg, v["gwm"], 0) != sweep.warm_dir(
        tmp_path, cfg, v["free_think"], 0
    )
    other = load_finding("reasoning", overrides=["warm.episodes=8"])
    assert sweep.warm_dir(tmp_path, cfg, v["gwm"], 0) != sweep.warm_dir(
        tmp_path, other, other.variants["gwm"], 0
    )


def test_warm_start_keys_added_later_count_only_when_set(tmp_path):
    """The auxiliary-format keys came after warm starts were built: at their defaults the
    folder name is what it was (seed folders are reused), set they make a new one."""
    cfg = load_finding("reasoning")
    v = cfg.variants["free_think"]
    assert sweep.warm_dir(tmp_path, cfg, v, 0).parent.name == "frozen_lake-free_think-a1-c5cbcba8"
    aux = load_finding(
        "reasoning", overrides=["warm.aux_reasoning=grounding", "warm.aux_episodes=64"]
    )
    assert sweep.warm_dir(tmp_path, aux, aux.variants["free_think"], 0) != sweep.warm_dir(
        tmp_path, cfg, v, 0
    )


def test_config_errors_are_one_line():
    with pytest.raises(ConfigError, match="no finding 'nope'"):
        load_finding("nope")
    with pytest.raises(ConfigError, match="no budget 'tpu'"):
        load_finding("echo_trap", "tpu")
    with pytest.raises(ConfigError, match="both calibrated on and scored"):
        load_finding("echo_trap", overrides=["collapse.score_seeds=[2,3]"])


# -- the collapse study ---------------------------------------------------------------
def test_collapse_step_is_judged_on_the_outcome():
    flat = [(s, 0.5) for s in range(1, 21)]
    assert prediction.collapse_step(flat, 3, 0.5) is None
    falls = [(s, 0.5 if s < 8 else 0.05) for s in range(1, 21)]
    assert prediction.collapse_step(falls, 3, 0.5) == 9  # mean of steps 7-9 = 0.2 < 0.25
    assert prediction.collapse_step([(s, 0.0) for s in range(1, 10)], 3, 0.5) is None


def _rows(std, entropy, grad, mi=None):
    rows = []
    for k, (a, b, c) in enumerate(zip(std, entropy, grad), start=1):
        row = {"step": k, "rollout/group_reward_std": a, "actor/entropy": b,
               "actor/grad_norm_max": c}  # fmt: skip
        if mi is not None:
            row["reasoning/mutual_info"] = mi[k - 1]
        rows.append(row)
    return rows


def test_thresholds_come_from_the_healthy_runs_and_score_lead_and_false_alarms():
    signals = ["group_reward_std", "entropy", "grad_norm", "mutual_info"]
    n = 20
    # healthy: std dips to 70% of its peak, entropy to 80%, grad norm 2x its median,
    # MI ~0 all along (identical prompts: never measurable)
    healthy = _rows(
        [0.3] * 8 + [0.21] * 12, [1.0] * 10 + [0.8] * 10, [1.0] * 12 + [2.0] + [1.0] * 7, [0.0] * n
    )
    diags = prediction.diagnostics(healthy, signals)
    cal = prediction.calibrate([diags], signals, drop_margin=0.9, spike_margin=1.25)
    assert cal.thresholds["group_reward_std"] == pytest.approx(0.9 * 0.7, abs=1e-3)
    assert cal.thresholds["entropy"] == pytest.approx(0.9 * 0.8, abs=1e-3)
    assert cal.thresholds["grad_norm"] == pytest.approx(1.25 * 2.0, abs=1e-3)
    assert cal.thresholds["mutual_info"] is None and "never measurable" in cal.notes["mutual_info"]
    items = prediction.threshold_overrides(cal)
    assert items[0] == "trainer.collapse.signals=[group_reward_std,entropy,grad_norm]"
    assert "trainer.collapse.group_std_ratio=0.63" in items
    # scoring: a collapse at step 12 warned at 9 (lead +3), one missed, one false alarm
    runs = [
        {"collapses": 12, "warnings": {"group_reward_std": 9, "entropy": 14}},
        {"collapses": 10, "warnings": {}},
        {"collapses": None, "warnings": {"grad_norm": 6}},
        {"collapses": None, "warnings": {}},
    ]
    table = prediction.score_runs(runs, ["group_reward_std", "entropy", "grad_norm"])
    std = table["group_reward_std"]
    assert (std["collapsing"], std["early"], std["missed"], std["leads"]) == (2, 1, 1, [3])
    assert table["entropy"]["late"] == 1 and table["entropy"]["leads"] == [-2]
    assert table["grad_norm"]["false_alarms"] == 1 and table["grad_norm"]["healthy"] == 2
    assert table["any"]["early"] == 1 and table["any"]["false_alarms"] == 1


def test_calibration_needs_a_healthy_run():
    with pytest.raises(ValueError, match="does not collapse"):
        prediction.calibrate([], ["entropy"], 0.9, 1.25)


# -- figures --------------------------------------------------------------------------
def test_seed_band_uses_the_steps_every_seed_logged(tmp_path):
    xs, mean, std, low, high = seed_band([[(1, 0.0), (2, 1.0), (3, 2.0)], [(2, 3.0), (3, 4.0)]])
    assert xs == [2, 3] and mean == [2.0, 3.0] and std[0] == pytest.approx(math.sqrt(2))
    assert low == [1.0, 2.0] and high == [3.0, 4.0]
    series = {"a": {0: {"k@step": [(1, 0.1), (2, 0.2)]}, 1: {"k@step": [(1, 0.3), (2, 0.4)]}}}
    png = plot_sweep(series, [("k@step", "k", "step")], tmp_path / "f.png", "title")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


# -- one command, end to end ----------------------------------------------------------
TOY = """
title: toy
claim: a claim
env: bandit
steps: 2
env_groups: 2
group_size: 2
max_new_tokens: 16
val_every: 1
val_groups: 4
warm: {episodes: 8, epochs: 1, batch_size: 8}
overrides: [trainer.reasoning_samples=4, trainer.save_trajectories=false]
variants:
  fresh: {algo: starpo, label: fresh}
  reuse2: {algo: starpo, overrides: [trainer.rollout_reuse=2]}
curves: ["val/success_rate|validation", "rollout/success_rate|train vs episodes|episodes"]
collapse: {calibrate_seeds: [0], score_seeds: [1], signals: [entropy, grad_norm]}
"""


def test_one_command_trains_the_sweep_and_writes_figure_table_thresholds(tmp_path):
    from experiments.findings.run import main

    config = tmp_path / "toy.yaml"
    config.write_text(TOY)
    results = tmp_path / "results"
    args = [str(config), "--root", str(tmp_path / "root"), "--results", str(results)]
    assert main(args) == 0
    out = tmp_path / "root" / "toy"
    for v in ("fresh", "reuse2"):
        for s in (0, 1):
            assert (out / "runs" / v / f"seed{s}" / sweep.DONE).exists()
    assert (results / "toy.png").exists() and (results / "toy-collapse.png").exists()
    table = (results / "toy.md").read_text()
    assert "a claim" in table and "| fresh | 2 |" in table
    numbers = json.loads((results / "toy.json").read_text())
    assert set(numbers["runs"]) == {"fresh", "reuse2"}
    # the thresholds file is a ragen train config; the scored runs trained with it
    thresholds = results / "toy-thresholds.yaml"
    chosen = load_config([f"config={thresholds}"]).trainer.collapse
    scored = (out / "runs" / "fresh" / "seed1" / "config.yaml").read_text()
    assert f"entropy_ratio: {chosen.entropy_ratio}" in scored
    assert json.loads((out / "thresholds.json").read_text())["calibrate_seeds"] == [0]
    # a finished run is not trained again; --report-only rewrites the report alone
    mtime = (out / "runs" / "fresh" / "seed0" / "metrics.jsonl").stat().st_mtime
    assert main([*args, "--report-only"]) == 0
    assert (out / "runs" / "fresh" / "seed0" / "metrics.jsonl").stat().st_mtime == mtime


def test_jobs_train_the_runs_side_by_side_from_warm_starts_built_once(tmp_path):
    from experiments.findings.run import main

    config = tmp_path / "toy.yaml"
    config.write_text(TOY.replace("collapse:", "# collapse:") + "seeds: [0, 1]\n")
    results = tmp_path / "results"
    args = [str(config), "--root", str(tmp_path / "root"), "--results", str(results)]
    assert main([*args, "--jobs", "2"]) == 0
    runs = tmp_path / "root" / "toy" / "runs"
    for v in ("fresh", "reuse2"):
        for s in (0, 1):
            assert (runs / v / f"seed{s}" / sweep.DONE).exists()
    # both variants play alike: one warm start per seed, shared
    warm = [p for p in (tmp_path / "root" / "warm").iterdir() if not p.name.startswith("tiny")]
    assert len(warm) == 1 and sorted(p.name for p in warm[0].iterdir()) == ["seed0", "seed1"]
    assert "| fresh | 2 |" in (results / "toy.md").read_text()
    assert main([*args, "--jobs", "0"]) == 2  # a usage error, one line


def test_a_failed_job_leaves_the_others_and_names_itself():
    from experiments.findings.run import _in_processes

    with pytest.raises(RuntimeError, match=r"1 of 2 jobs failed[\s\S]*bad: ValueError"):
        _in_processes(int, {"bad": ("x",), "good": ("3",)}, jobs=2)
