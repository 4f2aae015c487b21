"""Echo-trap early warning in a real (nano) run: events, on_collapse=stop, rollback."""

import json
import math

import pytest

from ragen.errors import ConfigError
from ragen.trainer.config import load_config
from ragen.trainer.metrics_logger import read_events, read_metrics
from ragen.trainer.starpo import StarPOTrainer

# Thresholds no run stays under: with a 1-step window, entropy below its running peak or a
# grad norm above the previous one fires as soon as either metric wobbles; min_steps pins
# the first step a warning may come at.
FORCE = [
    "trainer.collapse.signals=[grad_norm,entropy,group_reward_std,mutual_info]",
    "trainer.collapse.window=1",
    "trainer.collapse.min_drop=0",
    "trainer.collapse.entropy_ratio=0.9999999",
    "trainer.collapse.group_std_ratio=0.9999999",
    "trainer.collapse.mutual_info_ratio=0.9999999",
    "trainer.collapse.grad_norm_spike=1.0000001",
    "trainer.collapse.grad_norm_history=1",
    "trainer.collapse.min_steps=3",
]


def _cfg(model_dir, run_dir, steps, extra=()):
    return load_config(
        [
            "env=bandit",
            "algo=grpo",
            f"model.path={model_dir}",
            "model.actor_lr=1e-3",
            "rollout.env_groups=4",
            "rollout.group_size=2",
            "rollout.max_new_tokens=12",
            "algo.ppo_mini_batch_size=8",
            f"trainer.total_steps={steps}",
            "trainer.val_every=0",
            "trainer.save_every=2",
            "trainer.console=false",
            "trainer.tensorboard=false",
            "trainer.save_trajectories=false",
            "trainer.reasoning_samples=4",
            f"trainer.run_dir={run_dir}",
            *extra,
        ]
    )


def _lines(run):
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def test_warn_logs_event_and_reasoning_metrics(tiny_model_dir, tmp_path):
    run = tmp_path / "run"
    StarPOTrainer(_cfg(tiny_model_dir, run, 4, FORCE)).train()
    rows = read_metrics(run)
    assert [r["step"] for r in rows] == [1, 2, 3, 4]  # events are not steps
    for key in ("reasoning/cond_entropy", "reasoning/samples", "collapse/warnings"):
        assert key in rows[0]
    # 4 of the 8 episodes scored; the bandit shows one of two arm orders, and identical
    # prompts are one input: at most 2 distinct prompts, so MI <= log 2 (not log 4)
    assert all(r["reasoning/samples"] == 4 and r["reasoning/prompts"] <= 2 for r in rows)
    with_mi = [r for r in rows if "reasoning/mutual_info" in r]
    assert with_mi, "some step must draw both arm orders"
    for r in with_mi:
        bound = r["reasoning/mutual_info_max"]
        assert 0 < bound <= math.log(2) + 1e-9 and r["reasoning/mutual_info"] <= bound + 1e-9
    assert rows[0]["reasoning/cond_entropy"] > 0
    events = read_events(run, "collapse")
    assert events, "the forced threshold must fire"
    ev = events[0]
    assert ev["action"] == "warn"
    assert ev["step"] >= 3
    assert {"step", "time", "event", "signal", "message", "action"} <= set(ev)
    # the event line follows the metrics line of its step
    lines = _lines(run)
    k = lines.index(next(line for line in lines if line.get("event")))
    assert lines[k - 1]["step"] == ev["step"] and "event" not in lines[k - 1]


def test_stop_ends_the_run_at_the_warning(tiny_model_dir, tmp_path):
    run = tmp_path / "run"
    history = StarPOTrainer(
        _cfg(tiny_model_dir, run, 6, [*FORCE, "trainer.on_collapse=stop"])
    ).train()
    ev = read_events(run, "collapse")[0]
    assert ev["action"] == "stop"
    assert len(history) == ev["step"] < 6
    assert read_metrics(run)[-1]["step"] == ev["step"]
    assert (run / "checkpoints" / f"step_{ev['step']:06d}").is_dir()  # the stop step is saved


def test_rollback_restores_checkpoint_and_applies_change(tiny_model_dir, tmp_path):
    run = tmp_path / "run"
    cfg = _cfg(
        tiny_model_dir,
        run,
        5,
        [
            *FORCE,
            "trainer.on_collapse=rollback",
            "trainer.max_rollbacks=1",
            "trainer.rollback_change=[model.actor_lr=*0.5,algo.filter.value=1.0]",
        ],
    )
    trainer = StarPOTrainer(cfg)
    history = trainer.train()
    rb = read_events(run, "rollback")
    assert len(rb) == 1
    fired = rb[0]["from_step"]
    restored = rb[0]["step"]
    # the last checkpoint strictly before the warning (save_every=2; step 0 saved at start)
    assert restored == (fired - 1) // 2 * 2 < fired
    assert rb[0]["change"]["model.actor_lr"] == [1e-3, 5e-4]
    assert trainer.cfg.model.actor_lr == 5e-4
    assert trainer.actor_opt.param_groups[0]["lr"] == pytest.approx(5e-4)
    # every step logged once, in order; the abandoned branch moved aside
    assert [r["step"] for r in read_metrics(run)] == [1, 2, 3, 4, 5]
    assert len(history) == 5
    assert any((run / "superseded").iterdir())
    col = read_events(run, "collapse")
    assert col[0]["action"] == "rollback" and col[0]["restored_step"] == restored
    # later warnings find no rollback left: they only warn
    assert all(
        e["action"] == "warn" for e in col if e["step"] != fired or e["action"] != "rollback"
    )
    assert sum(e["action"] == "rollback" for e in col) >= 1


def test_two_rollbacks_to_the_same_checkpoint_apply_the_change_each_time(tiny_model_dir, tmp_path):
    # only the step-0 checkpoint exists before the warnings: both rollbacks load it, and
    # it holds the starting rate 1e-3; the second must still end at 1e-3 * 0.5 * 0.5
    run = tmp_path / "run"
    extra = [*FORCE, "trainer.on_collapse=rollback", "trainer.max_rollbacks=2"]
    cfg = _cfg(tiny_model_dir, run, 5, [*extra, "trainer.save_every=100"])
    trainer = StarPOTrainer(cfg)
    trainer.train()
    rb = read_events(run, "rollback")
    assert [e["step"] for e in rb] == [0, 0]  # both restored step 0
    assert [e["change"]["model.actor_lr"] for e in rb] == [[1e-3, 5e-4], [5e-4, 2.5e-4]]
    # the optimizer holds what each event announced, read back right after the change
    assert [e["lr"]["actor"] for e in rb] == pytest.approx([5e-4, 2.5e-4])
    assert trainer.actor_opt.param_groups[0]["lr"] == pytest.approx(2.5e-4)
    assert trainer.actor_sched.base_lrs == pytest.approx([2.5e-4])
    assert "actor_lr: 0.00025" in (run / "config.yaml").read_text()
    after = [r["actor/lr"] for r in read_metrics(run) if r["step"] > rb[1]["from_step"] - 1]
    assert after and all(lr == pytest.approx(2.5e-4) for lr in after)
    # each abandoned branch is kept for reading
    assert len(list((run / "superseded").iterdir())) == 2


def test_rollback_to_onset_goes_back_before_the_decline(tiny_model_dir, tmp_path):
    run = tmp_path / "run"
    extra = [*FORCE, "trainer.on_collapse=rollback", "trainer.max_rollbacks=1"]
    cfg = _cfg(tiny_model_dir, run, 4, [*extra, "trainer.rollback_to=onset"])
    cfg.trainer.save_every = 1
    StarPOTrainer(cfg).train()
    (ev,) = [e for e in read_events(run, "collapse") if e["action"] == "rollback"][:1]
    assert ev["restored_step"] == min(ev["onset"], ev["step"] - 1)


def test_rollback_change_is_validated():
    with pytest.raises(ConfigError, match="cannot change mid-run"):
        load_config(["trainer.rollback_change=[rollout.group_size=4]"])
    with pytest.raises(ConfigError, match="positive"):
        load_config(["trainer.rollback_change=[model.actor_lr=*-1]"])
    with pytest.raises(ConfigError, match="on_collapse"):
        load_config(["trainer.on_collapse=panic"])
    with pytest.raises(ConfigError, match="signals"):
        load_config(["trainer.collapse.signals=[reward]"])
