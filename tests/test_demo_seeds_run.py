"""The demo-over-seeds runner's bookkeeping: how each warm start's SFT ended is kept
beside its results, and rebuilding the tables from finished runs keeps the runs'
provenance."""

import json

import experiments.demo_seeds.run as demo_seeds


def _finished_seed(folder, extra_epochs):
    """A finished demo run folder: Sokoban's results and its SFT metrics."""
    per_state = {"warm start (SFT)": [0.0, 1.0, 0.0, 0.0], "after RL": [1.0, 1.0, 0.0, 1.0]}
    results = {
        "sokoban": {k: {"success_rate": sum(v) / 4, "per_state": v} for k, v in per_state.items()}
    }
    (folder / "sokoban" / "sft").mkdir(parents=True)
    (folder / "results.json").write_text(json.dumps(results))
    first = {"step": 1, "epoch": 0, **({"extra_epochs": extra_epochs} if extra_epochs else {})}
    rows = [
        first,
        {"step": 2, "epoch": 1, "train_reply_accuracy": 0.6, "heldout_reply_accuracy": 0.5},
    ]
    (folder / "sokoban" / "sft" / "sft_metrics.jsonl").write_text(
        "\n".join(json.dumps(r) for r in rows) + "\n"
    )


def test_report_only_keeps_the_runs_provenance_and_records_the_sft_fit(tmp_path, monkeypatch):
    monkeypatch.setattr(demo_seeds, "RESULTS", tmp_path / "results")
    floor = {"after_step": 1, "train_reply_accuracy": 0.2, "epochs": 2}
    _finished_seed(tmp_path / "runs" / "t" / "seed0", floor)
    _finished_seed(tmp_path / "runs" / "t" / "seed1", None)
    (tmp_path / "results").mkdir()
    made = {"command": "python -m experiments.demo_seeds.run --seeds 0 1", "device": "CPU",
            "commit": "abc1234", "date": "2026-01-01", "wall_seconds": {"0": 60.0, "1": 61.0}}  # fmt: skip
    (tmp_path / "results" / "t.json").write_text(json.dumps(made))
    argv = ["--seeds", "0", "1", "--label", "t", "--out", str(tmp_path / "runs"), "--report-only"]
    assert demo_seeds.main(argv) == 0
    data = json.loads((tmp_path / "results" / "t.json").read_text())
    assert {k: data[k] for k in ("command", "commit", "date")} == {
        k: made[k] for k in ("command", "commit", "date")
    }
    assert "--report-only" in data["rebuilt_by"]["command"]
    assert data["wall_seconds"] == made["wall_seconds"]
    fits = {s: data["runs"][s]["sokoban"]["sft_fit"] for s in ("0", "1")}
    assert fits["0"] == {"steps": 2, "train_reply_accuracy": 0.6, "heldout_reply_accuracy": 0.5,
                         "extra_epochs": floor}  # fmt: skip
    assert fits["1"]["extra_epochs"] is None
    assert data["summary"]["sokoban"]["seeds"]["0"]["gain"]["mean"] == 0.5
