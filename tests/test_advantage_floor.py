"""``algo.advantage_floor``: advantages below a floor are raised to it before the update.

Floor 0 keeps only the push of better-than-baseline samples (``trainer.advantages.
floor_advantages``); prompt tokens are never touched; the config rejects non-finite
floors; a real training step logs the share of tokens raised.
"""

from __future__ import annotations

import json

import pytest
import torch
from fakes import advantage_batch, short_train_args

from ragen.batching import TrainingBatch
from ragen.errors import ConfigError
from ragen.trainer.advantages import floor_advantages
from ragen.trainer.config import load_config


def _batch() -> TrainingBatch:
    # the prompt positions (mask 0) hold junk that the floor must leave alone
    return advantage_batch(
        [[0, 1, 1, 1, 0], [0, 0, 1, 1, 1]],
        [[-9.0, 2.0, -1.0, 3.0, -9.0], [-9.0, -9.0, -2.0, 0.5, 0.0]],
    )


def test_floor_zero_drops_the_negative_advantages_of_response_tokens_only():
    batch = _batch()
    metrics = floor_advantages(batch, 0.0)
    expected = torch.tensor([[-9.0, 2.0, 0.0, 3.0, -9.0], [-9.0, -9.0, 0.0, 0.5, 0.0]])
    assert torch.equal(batch.advantages, expected)
    assert metrics["actor/floored_frac"] == pytest.approx(2 / 6)  # -1 and -2 of 6 tokens


def test_a_negative_floor_caps_the_push_down_and_keeps_the_rest():
    batch = _batch()
    floor_advantages(batch, -1.5)
    assert batch.advantages[1, 2] == -1.5  # -2 raised
    assert batch.advantages[0, 2] == -1.0  # above the floor: unchanged
    assert batch.advantages[0, 3] == 3.0


def test_missing_advantages_is_an_error():
    batch = _batch()
    batch.advantages = None
    with pytest.raises(ValueError, match="advantages"):
        floor_advantages(batch, 0.0)


@pytest.mark.parametrize("bad", ["nan", "inf", "-inf"])
def test_non_finite_floors_are_config_errors(bad):
    with pytest.raises(ConfigError, match="algo.advantage_floor"):
        load_config(["env=sokoban", "algo=starpo-s", f"algo.advantage_floor={bad}"])


def test_the_floor_is_off_by_default():
    assert load_config(["env=sokoban", "algo=starpo-s"]).algo.advantage_floor is None


def test_a_training_step_logs_the_share_of_tokens_raised(tiny_model_dir, tmp_path):
    from ragen.cli import main

    run = tmp_path / "run"
    assert main(short_train_args(tiny_model_dir, run, "algo.advantage_floor=0")) == 0
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    fracs = [r["actor/floored_frac"] for r in rows if "actor/floored_frac" in r]
    assert fracs and all(0.0 <= f <= 1.0 for f in fracs)
