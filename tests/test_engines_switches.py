"""The speed switches: model.engine, trainer.bf16_cpu / SFTConfig.bf16 (ragen.models.precision)."""

from __future__ import annotations

import contextlib

import pytest
import torch

from ragen.errors import ConfigError
from ragen.models import precision
from ragen.trainer.config import load_config


def test_model_engine_is_validated():
    assert load_config([]).model.engine == "static"
    assert load_config(["model.engine=compiled"]).model.engine == "compiled"
    with pytest.raises(ConfigError, match="model.engine"):
        load_config(["model.engine=vllm"])


def test_cpu_autocast_runs_matmuls_in_bf16_only_when_asked(monkeypatch):
    a = torch.randn(4, 8)
    with precision.cpu_autocast(False):
        assert (a @ a.T).dtype == torch.float32
    monkeypatch.setattr(precision, "cpu_bf16_supported", lambda: True)
    with precision.cpu_autocast(True):
        assert (a @ a.T).dtype == torch.bfloat16
        # log-probs upcast the logits (ragen.models.logprobs) and stay float32 after that
        assert torch.log_softmax((a @ a.T).float(), -1).dtype == torch.float32
    monkeypatch.setattr(precision, "cpu_bf16_supported", lambda: False)  # no avx512_bf16/AMX
    assert isinstance(precision.cpu_autocast(True), contextlib.nullcontext)


def test_sft_step_under_bf16_keeps_fp32_weights_and_grads(monkeypatch, tiny_model_dir):
    """SFT with bf16 autocast: weights, grads and optimizer state stay float32, and the
    loss matches the float32 loss to bf16 precision."""
    from ragen.agent.rollout import RolloutConfig
    from ragen.models.loading import load_policy
    from ragen.sft.config import SFTConfig
    from ragen.sft.expert_data import make_expert_data
    from ragen.sft.trainer import train_sft

    monkeypatch.setattr(precision, "cpu_bf16_supported", lambda: True)
    _, tok = load_policy(tiny_model_dir, device="cpu")  # a CPU test on any machine
    rollout = RolloutConfig(max_turns=1, max_actions_per_turn=1, max_actions_per_trajectory=1)
    losses = {}
    for bf16 in (False, True):
        cfg = SFTConfig(
            env="bandit", rollout=rollout, episodes=8, epochs=1, batch_size=8, bf16=bf16
        )
        model, _ = load_policy(tiny_model_dir, device="cpu")
        history = train_sft(model, tok, make_expert_data(tok, cfg), cfg, log=lambda m: None)
        assert all(p.dtype == torch.float32 for p in model.parameters())
        losses[bf16] = history[0]["loss"]
    assert losses[True] == pytest.approx(losses[False], rel=2e-2)
