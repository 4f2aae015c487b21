"""Memory-lean log-probs and entropy: values and gradients against plain torch."""

from __future__ import annotations

import math

import pytest
import torch

from ragen.algo import entropy_from_logits, logprobs_from_logits


def _inputs(dtype=torch.float64, seed=0):
    gen = torch.Generator().manual_seed(seed)
    logits = (torch.randn(3, 5, 11, generator=gen, dtype=torch.float64) * 3).to(dtype)
    labels = torch.randint(0, 11, (3, 5), generator=gen)
    return logits, labels


def test_hand_computed_two_token_vocab():
    # logits [0, ln 3] -> p = [1/4, 3/4]; log p(1) = ln 0.75; H = -(1/4 ln 1/4 + 3/4 ln 3/4)
    logits = torch.tensor([[[0.0, math.log(3.0)]]])
    assert logprobs_from_logits(logits, torch.tensor([[1]])).item() == pytest.approx(math.log(0.75))
    h = -(0.25 * math.log(0.25) + 0.75 * math.log(0.75))
    assert entropy_from_logits(logits).item() == pytest.approx(h, rel=1e-6)


@pytest.mark.parametrize("chunk_elements", [11, 40, 1 << 24])  # 1 row, 3 rows, everything
def test_match_torch_values_and_gradients(chunk_elements):
    logits, labels = _inputs()
    x = logits.clone().requires_grad_(True)
    lp = logprobs_from_logits(x, labels, chunk_elements=chunk_elements)
    ent = entropy_from_logits(x, chunk_elements=chunk_elements)
    weights = torch.randn(2, 3, 5, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    (lp * weights[0] + ent * weights[1]).sum().backward()

    y = logits.clone().requires_grad_(True)
    log_p = torch.log_softmax(y, -1)
    ref_lp = log_p.gather(-1, labels[..., None]).squeeze(-1)
    ref_ent = -(log_p.exp() * log_p).sum(-1)
    (ref_lp * weights[0] + ref_ent * weights[1]).sum().backward()

    torch.testing.assert_close(lp, ref_lp)
    torch.testing.assert_close(ent, ref_ent)
    torch.testing.assert_close(x.grad, y.grad)


def test_gradcheck():
    logits, labels = _inputs(seed=2)
    logits = logits[:1, :2].clone().requires_grad_(True)
    assert torch.autograd.gradcheck(
        lambda z: logprobs_from_logits(z, labels[:1, :2], 11), (logits,)
    )
    assert torch.autograd.gradcheck(lambda z: entropy_from_logits(z, 11), (logits,))


def test_bfloat16_logits_give_float32_outputs_and_bf16_grads():
    logits, labels = _inputs(torch.bfloat16, seed=3)
    x = logits.clone().requires_grad_(True)
    lp = logprobs_from_logits(x, labels)
    ent = entropy_from_logits(x)
    assert lp.dtype == ent.dtype == torch.float32
    ref = torch.log_softmax(logits.float(), -1)
    torch.testing.assert_close(lp, ref.gather(-1, labels[..., None]).squeeze(-1))
    (lp.sum() + ent.sum()).backward()
    assert x.grad.dtype == torch.bfloat16 and torch.isfinite(x.grad.float()).all()


def test_masked_vocab_entries_are_finite():
    logits = torch.tensor([[0.0, 0.0, -math.inf]], requires_grad=True)
    ent = entropy_from_logits(logits)
    assert ent.item() == pytest.approx(math.log(2.0))
    ent.sum().backward()
    assert torch.isfinite(logits.grad).all()


def test_label_shape_errors():
    logits, labels = _inputs()
    with pytest.raises(ValueError, match="labels shape"):
        logprobs_from_logits(logits, labels[:, :3])
    with pytest.raises(TypeError, match="integer"):
        logprobs_from_logits(logits, labels.double())
