"""Progress lines: silent for short phases, throttled, with time left, off on request."""

import io

import pytest

from ragen import progress
from ragen.progress import Progress, duration


@pytest.fixture
def clock(monkeypatch):
    """A settable clock in place of ``time.perf_counter`` inside ragen.progress."""
    now = {"t": 1000.0}
    monkeypatch.setattr(progress.time, "perf_counter", lambda: now["t"])
    monkeypatch.setitem(progress._state, "last_print", 0.0)
    monkeypatch.delenv("RAGEN_PROGRESS", raising=False)
    return now


def test_a_short_phase_prints_nothing(clock):
    out = io.StringIO()
    with Progress("rollout", 5, "turn", stream=out) as p:
        for _ in range(5):
            clock["t"] += 0.5
            p.advance()
    assert out.getvalue() == ""


def test_a_long_phase_prints_its_units_and_the_time_left_then_its_end(clock):
    out = io.StringIO()
    with progress.labelled("step 3/20"):
        p = Progress("rollout", 5, "turn", stream=out)
        for _ in range(5):
            clock["t"] += 6.0  # each turn 6 s: lines after 5 s, at most one per 10 s
            p.advance()
        p.close()
    lines = out.getvalue().splitlines()
    assert lines[0] == "[progress] step 3/20 rollout: turn 1/5 · 6 s, about 24 s left"
    # throttled: turn 2 came 6 s after the first line, turn 3 12 s after it
    assert lines[1] == "[progress] step 3/20 rollout: turn 3/5 · 18 s, about 12 s left"
    assert lines[-1] == "[progress] step 3/20 rollout: done in 30 s"
    assert len(lines) == 4  # turns 1, 3, 5 and the end


def test_nested_phases_share_the_throttle(clock):
    out = io.StringIO()
    outer = Progress("rollout", 2, "turn", stream=out)
    inner = Progress("decoding", 100, "token", stream=out)
    for _ in range(100):
        clock["t"] += 0.5
        inner.advance()
        outer.advance(0)
    assert 4 <= len(out.getvalue().splitlines()) <= 5  # 50 s: one line per 10 s at most


def test_progress_lines_can_be_turned_off(clock, monkeypatch):
    monkeypatch.setenv("RAGEN_PROGRESS", "0")
    out = io.StringIO()
    p = Progress("update", 3, "micro-batch", stream=out)
    clock["t"] += 60
    p.advance()
    p.close()
    assert out.getvalue() == ""


def test_durations_read_at_a_glance():
    assert duration(7.4) == "7 s"
    assert duration(125) == "2 min 05 s"
    assert duration(3780) == "1 h 03 min"


def test_a_training_step_reports_its_phases(one_bandit_step, monkeypatch, capsys):
    """With the thresholds at 0 every phase of a tiny step prints: rollout turns, the
    engine's decode steps and the update's micro-batches, labelled with the step."""
    from ragen.trainer.config import load_config
    from ragen.trainer.starpo import StarPOTrainer

    monkeypatch.setattr(progress, "AFTER_S", 0.0)
    monkeypatch.setattr(progress, "EVERY_S", 0.0)
    monkeypatch.delenv("RAGEN_PROGRESS", raising=False)
    StarPOTrainer(load_config(one_bandit_step)).train()
    err = capsys.readouterr().err
    assert "[progress] step 1/1 rollout: turn 1/" in err
    assert "[progress] step 1/1 decoding 4 replies: token 1/" in err
    assert "[progress] step 1/1 update: micro-batch 1/" in err
