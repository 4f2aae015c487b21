"""Issue 55's inputs outside OpenEnv, replayed (docs/RELIABILITY.md, "Sizes, disks and
the last config keys"): numbers too big to read in a run's files, config keys that
slipped through validation (sizes past what the machine holds, container keys of the
wrong shape, a documented key nobody read), TextWorld's NaN reward, the opponent's
model folder, output folders on a full or read-only disk, and ``ragen sft``'s LoRA rank.
Each bad input must end in one line naming the problem and the fix, before any model
loads, and never exit 0."""

from __future__ import annotations

import math

from ragen.trainer.metrics_logger import MetricsLogger, move_logs_after, read_metrics


# -- item 7: a number of more than 4,300 digits in metrics.jsonl ----------------------------
def test_resume_reads_a_metrics_file_with_a_4301_digit_number(tmp_path):
    """The probe: `trainer.resume=auto` crashed on such a line (Python refuses int() of
    more than 4,300 digits). What resume reads, the logger reopened at the checkpoint's
    step and the later steps moved aside, now takes it as inf."""
    metrics = tmp_path / "metrics.jsonl"
    metrics.write_text(
        '{"step": 1, "rollout/reward_mean": 0.5}\n'
        '{"step": 2, "rollout/reward_mean": ' + "9" * 4301 + "}\n"
        '{"step": 3, "rollout/reward_mean": -' + "9" * 400 + "}\n"
        '{"step": 4, "rollout/reward_mean": 1.0}\n'
    )
    rows = read_metrics(tmp_path)
    assert [r["step"] for r in rows] == [1, 2, 3, 4]
    assert rows[1]["rollout/reward_mean"] == math.inf
    assert rows[2]["rollout/reward_mean"] == -math.inf
    assert move_logs_after(tmp_path, 3, tmp_path / "aside") == ["metrics.jsonl"]
    logger = MetricsLogger(tmp_path, total_steps=4, console=False, tensorboard=False, start_step=2)
    logger.close()
    assert [r["step"] for r in read_metrics(tmp_path)] == [1, 2]
    assert [r["step"] for r in read_metrics(tmp_path / "aside")] == [4]
