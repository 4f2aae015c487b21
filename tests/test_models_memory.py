"""Micro-batches that fit by construction (``ragen.models.memory``)."""

from types import SimpleNamespace

import pytest

import ragen.models.memory as memory
from ragen.errors import ConfigError


def _model(hidden=576, layers=30, mlp=1536):
    config = SimpleNamespace(hidden_size=hidden, num_hidden_layers=layers, intermediate_size=mlp)
    return SimpleNamespace(config=config)


def test_bytes_per_token_matches_the_smollm2_measurement():
    # measured: 1.07 MB per token at the margin, forward + backward, float32 (module doc)
    assert memory.activation_bytes_per_token(_model()) == pytest.approx(1.07e6, rel=0.02)
    assert memory.activation_bytes_per_token(SimpleNamespace(config=None)) == 0


def test_auto_takes_the_usual_budget_or_what_fits(monkeypatch):
    monkeypatch.setattr(memory, "free_bytes", lambda device: 20 * 2**30)
    assert (
        memory.resolve_token_budget(_model(hidden=128, layers=4, mlp=384), "cpu", 0, "k", 8192)
        == 8192
    )
    fits = memory.resolve_token_budget(_model(), "cpu", 0, "k", 65536)
    exact = int(0.4 * 20 * 2**30 // memory.activation_bytes_per_token(_model()))  # 8,104
    assert fits == 4096 and fits <= exact < 2 * fits  # the power of two below what fits
    monkeypatch.setattr(memory, "free_bytes", lambda device: None)  # cannot tell: as asked
    assert memory.resolve_token_budget(_model(), "cpu", 0, "k", 8192) == 8192


def test_the_auto_budget_does_not_follow_small_changes_in_free_memory(monkeypatch):
    """A seeded run's micro-batches (and so its float rounding) must not change because
    another job holds a few GB more or less: SmolLM2 on a 24 GB CPU got ~9,200 tokens
    idle and 5,088 beside two other runs before the budget was rounded."""
    budgets = set()
    for free_gib in (11, 13, 16, 19, 20):
        monkeypatch.setattr(memory, "free_bytes", lambda device, g=free_gib: g * 2**30)
        budgets.add(memory.auto_token_budget(_model(), "cpu"))
    assert budgets == {4096}
    monkeypatch.setattr(memory, "free_bytes", lambda device: 2**20)  # almost nothing free
    assert memory.auto_token_budget(_model(), "cpu") == memory.MIN_BUDGET


def test_a_budget_that_cannot_fit_is_refused_with_the_setting_to_lower(monkeypatch):
    monkeypatch.setattr(memory, "free_bytes", lambda device: 4 * 2**30)
    with pytest.raises(
        ConfigError, match=r"algo.micro_token_budget=16384: .* Fix: algo.micro_token_budget=\d+"
    ):
        memory.resolve_token_budget(_model(), "cpu", 16384, "algo.micro_token_budget", 8192)
    assert memory.resolve_token_budget(_model(), "cpu", 1024, "k", 8192) == 1024


def test_sft_refuses_a_budget_that_cannot_fit_before_training(tiny_model_dir, monkeypatch):
    import torch

    from ragen.agent.rollout import RolloutConfig
    from ragen.models import load_policy
    from ragen.sft.config import SFTConfig
    from ragen.sft.expert_data import make_expert_data
    from ragen.sft.trainer import train_sft

    model, tok = load_policy(tiny_model_dir, device="cpu", dtype=torch.float32)
    cfg = SFTConfig(env="sokoban", episodes=2, rollout=RolloutConfig(max_turns=2))
    data = make_expert_data(tok, cfg)
    before = [p.detach().clone() for p in model.parameters()]
    monkeypatch.setattr(memory, "free_bytes", lambda device: 2**20)  # 1 MiB free
    bad = SFTConfig(
        env="sokoban", episodes=2, rollout=RolloutConfig(max_turns=2), micro_token_budget=4096
    )
    with pytest.raises(ConfigError, match="micro_token_budget=4096"):
        train_sft(model, tok, data, bad, log=lambda m: None)
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))
    train_sft(model, tok, data, cfg, log=lambda m: None)  # auto: what fits (at least 512)


def test_sft_prints_the_auto_budget_and_the_flag_that_pins_it(tiny_model_dir, tmp_path, capsys):
    from ragen.cli import main

    args = ["sft", "--model", tiny_model_dir, "--env", "bandit", "--episodes", "4",
            "--epochs", "1", "--max-turns", "1"]  # fmt: skip
    assert main([*args, "--out", str(tmp_path / "auto")]) == 0
    out = capsys.readouterr().out
    (line,) = [x for x in out.splitlines() if x.startswith("sft: micro-batches of at most")]
    budget = int(line.split("at most ", 1)[1].split()[0])
    assert f"--micro-token-budget {budget} repeats this run" in line
    assert budget & (budget - 1) == 0  # a power of two (ragen.models.memory)
    assert main([*args, "--out", str(tmp_path / "pinned"), "--micro-token-budget", "512"]) == 0
    assert "sft: micro-batches of at most" not in capsys.readouterr().out  # pinned: no line
    assert main([*args, "--out", str(tmp_path / "bad"), "--micro-token-budget", "-1"]) == 2
    assert "micro_token_budget: padded tokens per micro-batch must be >= 0, got -1" in (
        capsys.readouterr().err
    )


def test_kv_cache_rows_that_fit(monkeypatch):
    """SmolLM2-135M: 30 layers x K and V x 3 K/V heads x 64 dims x 4 bytes = 46,080 bytes
    a token; 24 GiB free, 40% of it, 2,048 tokens a row: 109 rows."""
    config = SimpleNamespace(hidden_size=576, num_hidden_layers=30, num_attention_heads=9,
                             num_key_value_heads=3)  # fmt: skip
    model = SimpleNamespace(config=config)  # no parameters: float32 assumed
    assert memory.kv_bytes_per_token(model) == 30 * 2 * 3 * 64 * 4
    monkeypatch.setattr(memory, "free_bytes", lambda device: 24 * 2**30)
    assert memory.rows_that_fit(model, "cpu", 2048) == 109
    assert memory.rows_that_fit(model, "cpu", 10**9) == 1  # at least one row
    monkeypatch.setattr(memory, "free_bytes", lambda device: None)
    assert memory.rows_that_fit(model, "cpu", 2048) is None  # cannot tell: no cap
    assert memory.kv_bytes_per_token(SimpleNamespace(config=None)) == 0


def test_eval_plays_a_tiny_model_in_one_batch(tiny_model_dir):
    """``ragen eval``'s default batch is what fits in memory, not a fixed number of
    groups: a tiny model's 128 episodes are one rollout call, as the speed needs."""
    from ragen.agent.evaluate import build_policy, groups_that_fit
    from ragen.agent.rollout_config import RolloutConfig

    policy = build_policy(str(tiny_model_dir), None, None, "cpu", None, 0.0, 1, 0)
    assert groups_that_fit(policy, RolloutConfig(), group_size=1) >= 128
    oracle = build_policy("oracle", None, None, None, None, 0.0, 1, 0)
    assert groups_that_fit(oracle, RolloutConfig(), group_size=1) is None  # no local model
