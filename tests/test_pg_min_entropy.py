"""``algo.pg_min_entropy``: the policy gradient only on tokens the policy chose among.

A response token whose entropy under the behaviour policy is below the threshold gets
advantage 0 (``trainer.advantages.mask_certain_tokens``); the config rejects bad values;
a real training step logs the share of tokens kept.
"""

from __future__ import annotations

import json

import pytest
import torch
from fakes import advantage_batch, short_train_args

from ragen.batching import TrainingBatch
from ragen.errors import ConfigError
from ragen.trainer.advantages import mask_certain_tokens
from ragen.trainer.config import load_config


def _batch() -> TrainingBatch:
    batch = advantage_batch(
        [[0, 1, 1, 1, 0], [0, 0, 1, 1, 1]], [[0, 2.0, -1.0, 3.0, 0], [0, 0, -2.0, 0.5, 1.0]]
    )
    batch.old_entropy = torch.tensor([[0.9, 0.5, 0.01, 0.9, 0.9], [0, 0, 0.2, 0.05, 1.0]])
    return batch


def test_certain_tokens_lose_their_advantage_and_the_rest_keep_it():
    batch = _batch()
    metrics = mask_certain_tokens(batch, 0.1)
    expected = torch.tensor([[0, 2.0, 0.0, 3.0, 0], [0, 0, -2.0, 0.0, 1.0]])
    assert torch.equal(batch.advantages, expected)
    assert metrics["actor/pg_token_frac"] == pytest.approx(4 / 6)  # response tokens only


def test_threshold_zero_keeps_every_token_and_missing_entropy_is_an_error():
    batch = _batch()
    before = batch.advantages.clone()
    assert mask_certain_tokens(batch, 0.0)["actor/pg_token_frac"] == 1.0
    assert torch.equal(batch.advantages, before)
    batch.old_entropy = None
    with pytest.raises(ValueError, match="old_entropy"):
        mask_certain_tokens(batch, 0.1)


@pytest.mark.parametrize("bad", ["-0.1", "nan", "inf"])
def test_bad_thresholds_are_config_errors(bad):
    with pytest.raises(ConfigError, match="algo.pg_min_entropy"):
        load_config(["env=sokoban", "algo=starpo-s", f"algo.pg_min_entropy={bad}"])


def test_a_training_step_logs_the_share_of_tokens_trained(tiny_model_dir, tmp_path):
    from ragen.cli import main

    run = tmp_path / "run"
    assert main(short_train_args(tiny_model_dir, run, "algo.pg_min_entropy=0.5")) == 0
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    fracs = [r["actor/pg_token_frac"] for r in rows if "actor/pg_token_frac" in r]
    assert fracs and all(0.0 <= f <= 1.0 for f in fracs)
