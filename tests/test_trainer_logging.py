"""MetricsLogger: metrics.jsonl, resume truncation, TensorBoard, console lines, trajectories, W&B."""

from __future__ import annotations

import io
import json
import math
import re

import numpy as np
import pytest
import torch

from ragen.errors import MissingDependencyError
from ragen.trainer.metrics_logger import MetricsLogger, read_events, read_metrics

STEP_METRICS = {
    "rollout/success_rate": 0.25,
    "rollout/reward_mean": torch.tensor(0.5),  # tensors and numpy scalars become floats
    "actor/entropy": np.float32(1.5),
    "actor/grad_norm_max": 0.75,
    "val/success_rate": float("nan"),
}


def quiet_logger(run_dir, **kwargs) -> MetricsLogger:
    kwargs.setdefault("console", False)
    kwargs.setdefault("tensorboard", False)
    return MetricsLogger(run_dir, kwargs.pop("total_steps", 10), **kwargs)


def test_jsonl_has_one_object_per_step_with_step_and_time(tmp_path):
    with quiet_logger(tmp_path) as logger:
        for step in (1, 2, 3):
            logger.log(step, {**STEP_METRICS, "count": step, "flag": True})
    lines = (tmp_path / "metrics.jsonl").read_text().splitlines()
    assert len(lines) == 3
    first = json.loads(lines[0])  # strict JSON: no bare NaN
    assert first["step"] == 1 and isinstance(first["time"], float)
    assert first["rollout/reward_mean"] == 0.5 and first["actor/entropy"] == 1.5
    assert first["val/success_rate"] is None  # non-finite -> null
    assert first["count"] == 1 and first["flag"] == 1
    records = read_metrics(tmp_path)
    assert [r["step"] for r in records] == [1, 2, 3]
    assert math.isnan(records[0]["val/success_rate"])  # null -> nan on read


def test_resume_drops_steps_after_the_checkpoint(tmp_path):
    with quiet_logger(tmp_path) as logger:
        for step in range(1, 6):
            logger.log(step, {"x": float(step)})
            logger.log_trajectories(step, [{"step": step}])
    # resume from the checkpoint taken after step 3: steps 4 and 5 will be redone
    with quiet_logger(tmp_path, start_step=3) as logger:
        logger.log(4, {"x": 40.0})
    assert [(r["step"], r["x"]) for r in read_metrics(tmp_path)] == [
        (1, 1.0),
        (2, 2.0),
        (3, 3.0),
        (4, 40.0),
    ]
    files = sorted(p.name for p in (tmp_path / "trajectories").iterdir())
    assert files == ["step_000001.jsonl", "step_000002.jsonl", "step_000003.jsonl"]
    # a fresh run in the same folder starts a fresh file
    quiet_logger(tmp_path).close()
    assert read_metrics(tmp_path) == []


def test_truncated_last_line_from_a_crash_is_tolerated(tmp_path):
    with quiet_logger(tmp_path) as logger:
        logger.log(1, {"x": 1.0})
    with open(tmp_path / "metrics.jsonl", "a") as f:
        f.write('{"step": 2, "x"')  # killed mid-write
    with pytest.warns(UserWarning, match="truncated last line"):
        assert [r["step"] for r in read_metrics(tmp_path)] == [1]
    with quiet_logger(tmp_path, start_step=1) as logger:
        logger.log(2, {"x": 2.0})
    assert [r["step"] for r in read_metrics(tmp_path)] == [1, 2]


def test_tensorboard_event_files_hold_the_scalars(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    with quiet_logger(tmp_path, tensorboard=True, config={"algo": {"name": "starpo"}}) as logger:
        logger.log(1, {"val/success_rate": 0.5, "actor/entropy": 2.0})
        logger.log(2, {"val/success_rate": 0.75, "actor/entropy": 1.0})
    assert list((tmp_path / "tensorboard").glob("events.out.tfevents.*"))
    acc = EventAccumulator(str(tmp_path / "tensorboard"))
    acc.Reload()
    assert {"val/success_rate", "actor/entropy"} <= set(acc.Tags()["scalars"])
    assert [(e.step, e.value) for e in acc.Scalars("val/success_rate")] == [(1, 0.5), (2, 0.75)]


def test_console_prints_plain_lines_when_not_a_terminal(tmp_path):
    out = io.StringIO()  # not a TTY, like CI or `| tee`
    with MetricsLogger(tmp_path, 4, tensorboard=False, stream=out) as logger:
        logger.print("run folder: x")
        logger.log(1, {**STEP_METRICS, "timing/step": 0.1})
        logger.log(2, {"rollout/success_rate": 0.5})
    lines = out.getvalue().splitlines()
    assert lines[0] == "run folder: x"
    # times vary with machine load; the layout does not
    head = r"step 1/4 \| elapsed \d+:\d\d:\d\d \| eta \d+:\d\d:\d\d \| "
    assert re.match(head + r"success 0.25 \| reward 0.5 \| ent 1.5 \| gnorm 0.75", lines[1])
    assert "ent 1.5" in lines[1] and "gnorm 0.75" in lines[1] and "val nan" in lines[1]
    assert lines[2].startswith("step 2/4 | ") and "success 0.5" in lines[2]
    assert "\x1b" not in out.getvalue()  # no escape codes
    assert len(lines) == 3


def test_console_keys_choose_what_is_shown(tmp_path):
    out = io.StringIO()
    with MetricsLogger(
        tmp_path, 4, tensorboard=False, stream=out, console_keys=["critic/value_loss"]
    ) as logger:
        logger.log(1, {"critic/value_loss": 0.125, "rollout/success_rate": 1.0})
    line = out.getvalue().strip()
    assert "value_loss 0.125" in line and "success" not in line


def test_live_display_on_a_terminal(tmp_path):
    out = io.StringIO()
    with MetricsLogger(tmp_path, 4, tensorboard=False, stream=out, force_terminal=True) as logger:
        logger.log(1, STEP_METRICS)
        logger.print("hello above the bar")
    text = out.getvalue()
    assert "hello above the bar" in text and "step 1/4" in text and "success 0.25" in text


def test_trajectory_files(tmp_path):
    records = [
        {"seed": np.int64(3), "reward": float("inf"), "ids": torch.tensor([1, 2])},
        {"seed": 4, "turns": [{"response": "<answer>Up</answer>"}]},
    ]
    with quiet_logger(tmp_path) as logger:
        path = logger.log_trajectories(12, records)
    assert path == tmp_path / "trajectories" / "step_000012.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert rows[0] == {"seed": 3, "reward": None, "ids": [1, 2]}
    assert rows[1]["turns"][0]["response"] == "<answer>Up</answer>"


def test_bad_values_give_clear_errors(tmp_path):
    with quiet_logger(tmp_path) as logger:
        with pytest.raises(TypeError, match=r"'loss' must be a number.*reduction such as \.mean"):
            logger.log(1, {"loss": torch.ones(3)})
        with pytest.raises(TypeError, match="'phase' must be a number"):
            logger.log(1, {"phase": "train"})
    with pytest.raises(RuntimeError, match="closed"):
        logger.log(2, {"x": 1.0})
    with pytest.raises(ValueError, match="unknown W&B setting"):
        quiet_logger(tmp_path, wandb={"project": "p", "colour": "red"})


def test_wandb_offline_writes_into_the_run_folder(tmp_path, monkeypatch):
    pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_SILENT", "true")
    with quiet_logger(
        tmp_path, wandb={"project": "ragen-test", "mode": "offline", "name": "t"}, config={"a": 1}
    ) as logger:
        logger.log(1, {"x": 1.0})
    assert (tmp_path / "wandb_run_id.txt").is_file()
    assert list((tmp_path / "wandb").glob("offline-run-*"))


def test_wandb_missing_is_one_clear_error(tmp_path, monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_wandb(name, *args, **kwargs):
        if name == "wandb":
            raise ImportError("No module named 'wandb'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_wandb)
    with pytest.raises(MissingDependencyError, match=r"pip install 'ragen\[wandb\]'"):
        quiet_logger(tmp_path, wandb={"project": "p", "mode": "offline"})
    quiet_logger(tmp_path, wandb={"mode": "disabled"}).close()  # disabled needs no wandb


def test_events_share_metrics_jsonl_but_not_read_metrics(tmp_path):
    with MetricsLogger(tmp_path, 3, console=False, tensorboard=False) as log:
        log.log(1, {"x": 1.0})
        ev = log.log_event(1, "collapse", signal="entropy", message="m", action="warn")
        log.log(2, {"x": 2.0})
        with pytest.raises(ValueError, match="reserved"):
            log.log_event(2, "collapse", time=3)
    assert ev["event"] == "collapse" and ev["step"] == 1
    assert [r["step"] for r in read_metrics(tmp_path)] == [1, 2]
    assert len(read_metrics(tmp_path, events=True)) == 3
    (event,) = read_events(tmp_path, "collapse")
    assert {k: event[k] for k in ("step", "event", "signal", "action")} == {
        "step": 1,
        "event": "collapse",
        "signal": "entropy",
        "action": "warn",
    }
    assert read_events(tmp_path, "rollback") == []
    # a resume at step 1 keeps the event of step 1 and drops step 2
    MetricsLogger(tmp_path, 3, console=False, tensorboard=False, start_step=1).close()
    assert len(read_metrics(tmp_path, events=True)) == 2
