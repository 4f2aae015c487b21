"""The chunked LM head (``ragen.models.head_logprobs``) equals log_softmax(head(h) / T)
gathered at the labels, and its entropy, in value and in every gradient."""

import pytest
import torch

from ragen.models.head_logprobs import fusable_head, head_logprobs


def _reference(hidden, head, labels, temperature):
    logits = head(hidden).float() / temperature
    log_p = torch.log_softmax(logits, -1)
    entropy = -(log_p.exp() * log_p).sum(-1)
    return log_p.gather(-1, labels[:, None]).squeeze(-1), entropy


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("temperature", [1.0, 0.7])
@pytest.mark.parametrize("chunk_rows", [1, 5, 64])
def test_values_and_gradients_match_the_full_softmax(bias, temperature, chunk_rows):
    torch.manual_seed(0)
    n, h, v = 13, 8, 50
    head = torch.nn.Linear(h, v, bias=bias)
    hidden = torch.randn(n, h, requires_grad=True)
    labels = torch.randint(0, v, (n,))
    w_lp, w_ent = torch.randn(n), torch.randn(n)  # arbitrary upstream gradients

    lp, ent = head_logprobs(hidden, head, labels, temperature, True, chunk_rows)
    (lp * w_lp + ent * w_ent).sum().backward()
    got = [hidden.grad.clone(), head.weight.grad.clone()] + (
        [head.bias.grad.clone()] if bias else []
    )
    hidden.grad = None
    head.zero_grad()

    ref_lp, ref_ent = _reference(hidden, head, labels, temperature)
    (ref_lp * w_lp + ref_ent * w_ent).sum().backward()
    want = [hidden.grad, head.weight.grad] + ([head.bias.grad] if bias else [])
    torch.testing.assert_close(lp, ref_lp, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(ent, ref_ent, atol=1e-5, rtol=1e-5)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4)


def test_without_entropy_and_a_frozen_head():
    torch.manual_seed(1)
    head = torch.nn.Linear(6, 20, bias=False).requires_grad_(False)  # LoRA: head frozen
    hidden = torch.randn(9, 6, requires_grad=True)
    labels = torch.randint(0, 20, (9,))
    lp, ent = head_logprobs(hidden, head, labels)
    assert ent is None
    lp.sum().backward()
    ref = torch.func.grad(lambda x: _reference(x, head, labels, 1.0)[0].sum())(hidden.detach())
    torch.testing.assert_close(hidden.grad, ref, atol=1e-5, rtol=1e-4)
    assert head.weight.grad is None


def test_only_a_plain_linear_head_is_fused():
    assert fusable_head(torch.nn.Linear(2, 3))
    assert not fusable_head(torch.nn.Sequential(torch.nn.Linear(2, 3)))


def test_under_bf16_autocast_the_backward_matches_autocasts_own():
    """Under CPU bf16 autocast the backward's matmuls run in bf16 as autocast's backward
    of the unfused head would (float32 there was 4x slower on a bf16 CPU): the gradients
    agree with the unfused path's to bf16 precision, far from float32's."""
    torch.manual_seed(0)
    n, h, v = 64, 32, 300
    head = torch.nn.Linear(h, v, bias=False)
    hidden = torch.randn(n, h, requires_grad=True)
    labels = torch.randint(0, v, (n,))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        lp, _ = head_logprobs(hidden, head, labels, 1.0, False, 16)
    lp.sum().backward()
    got = [hidden.grad.clone(), head.weight.grad.clone()]
    hidden.grad = None
    head.zero_grad()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        ref_lp, _ = _reference(hidden, head, labels, 1.0)
    ref_lp.sum().backward()
    torch.testing.assert_close(lp, ref_lp, atol=2e-2, rtol=2e-2)
    for a, b in zip(got, [hidden.grad, head.weight.grad]):
        assert a.dtype == torch.float32
        torch.testing.assert_close(a, b, atol=3e-2, rtol=3e-2)
