"""AdamW runs fused for real models and unfused for small ones (whose seeded runs and
recorded results were made with it); both take the same steps within float rounding."""

import torch

from ragen.trainer import models


def test_a_large_model_gets_the_fused_step_and_a_small_one_the_plain_step(monkeypatch):
    monkeypatch.setattr(models, "FUSED_ADAMW_FROM", 100)
    big, small = torch.nn.Linear(10, 10), torch.nn.Linear(3, 3)
    assert models.make_optimizer(big, 1e-3, 0.0).defaults.get("fused") is True
    assert not models.make_optimizer(small, 1e-3, 0.0).defaults.get("fused")


def test_the_fused_step_equals_the_plain_one_within_rounding(monkeypatch):
    torch.manual_seed(0)
    plain, fused = torch.nn.Linear(16, 16), torch.nn.Linear(16, 16)
    fused.load_state_dict(plain.state_dict())
    monkeypatch.setattr(models, "FUSED_ADAMW_FROM", 10**9)
    opt_plain = models.make_optimizer(plain, 1e-2, 0.01)
    monkeypatch.setattr(models, "FUSED_ADAMW_FROM", 1)
    opt_fused = models.make_optimizer(fused, 1e-2, 0.01)
    x = torch.randn(32, 16)
    for _ in range(5):
        for model, opt in ((plain, opt_plain), (fused, opt_fused)):
            opt.zero_grad()
            model(x).square().mean().backward()
            opt.step()
    for a, b in zip(plain.parameters(), fused.parameters()):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5)
