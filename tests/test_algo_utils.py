"""Masked statistics."""

from __future__ import annotations

import math

import torch

from ragen.algo import masked_mean, masked_var, masked_whiten

X = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
M = torch.tensor([[1, 1, 0], [0, 1, 0]])  # selects 1, 2, 5


def test_masked_mean():
    assert math.isclose(float(masked_mean(X, M)), 8 / 3, rel_tol=1e-6)
    torch.testing.assert_close(masked_mean(X, M, dim=-1), torch.tensor([1.5, 5.0]))
    # An empty mask gives 0, not NaN.
    assert float(masked_mean(X, torch.zeros_like(M))) == 0.0


def test_masked_var():
    # squared deviations from 8/3: 25/9, 4/9, 49/9 -> sum 78/9
    assert math.isclose(float(masked_var(X, M, unbiased=False)), 78 / 27, rel_tol=1e-6)
    assert math.isclose(float(masked_var(X, M)), 78 / 18, rel_tol=1e-6)
    assert float(masked_var(X, torch.tensor([[0, 0, 0], [0, 1, 0]]))) == 0.0


def test_masked_whiten():
    out = masked_whiten(X, M)
    std = math.sqrt(78 / 18)
    expected = torch.tensor(
        [[(1 - 8 / 3) / std, (2 - 8 / 3) / std, 0.0], [0.0, (5 - 8 / 3) / std, 0.0]]
    )
    torch.testing.assert_close(out, expected)
    assert abs(float(masked_mean(out, M))) < 1e-6
    kept_mean = masked_whiten(X, M, shift_mean=False)
    torch.testing.assert_close(kept_mean, (expected + 8 / 3) * M)


def test_bfloat16_is_upcast():
    out = masked_mean(X.bfloat16(), M)
    assert out.dtype == torch.float32
    assert masked_whiten(X.double(), M).dtype == torch.float64
