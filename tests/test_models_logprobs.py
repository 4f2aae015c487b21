"""The LM head run only at wanted positions gives the full forward pass's numbers."""

import pytest
import torch

from ragen.models.logprobs import sequence_logprobs, split_head, token_logprobs


@pytest.fixture(scope="module")
def model_and_batch(tiny_model_dir):
    from ragen.models import load_policy

    torch.manual_seed(0)
    model, tok = load_policy(tiny_model_dir, dtype=torch.float32)
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(5, len(tok), (3, 24), generator=g)
    attn = torch.ones_like(ids)
    attn[1, 18:] = 0  # right padding
    attn[2, 20:] = 0
    positions = torch.zeros(3, 24)
    positions[0, 10:16] = 1
    positions[1, 5:9] = 1
    positions[1, 12:18] = 1
    positions[2, 19] = 1
    return model, ids, attn, positions


def _full(model, ids, attn, positions, temperature):
    lp, ent = sequence_logprobs(model, ids, attn, temperature, positions=None, with_entropy=True)
    return lp * positions, ent * positions


def test_head_only_matches_full_forward_values_and_gradients(model_and_batch):
    model, ids, attn, positions = model_and_batch
    assert split_head(model) is not None  # qwen2: the fast path is taken
    for temperature in (1.0, 0.7):
        model.zero_grad()
        lp, ent = sequence_logprobs(model, ids, attn, temperature, positions, with_entropy=True)
        (lp.sum() + 0.1 * ent.sum()).backward()
        fast = [p.grad.clone() for p in model.parameters()]
        model.zero_grad()
        lp_ref, ent_ref = _full(model, ids, attn, positions, temperature)
        (lp_ref.sum() + 0.1 * ent_ref.sum()).backward()
        torch.testing.assert_close(lp, lp_ref, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(ent, ent_ref, atol=1e-5, rtol=1e-5)
        assert (lp[positions == 0] == 0).all() and (ent[positions == 0] == 0).all()
        for a, b in zip(fast, [p.grad for p in model.parameters()]):
            torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4)
    model.zero_grad()


def test_token_logprobs_is_the_model_distribution(model_and_batch):
    model, ids, attn, _ = model_and_batch
    with torch.no_grad():
        lp = token_logprobs(model, ids[:1], attn[:1])
        logits = model(ids[:1]).logits.log_softmax(-1)
    expect = logits[0, :-1].gather(-1, ids[0, 1:, None])[:, 0]
    torch.testing.assert_close(lp[0, 1:], expect, atol=1e-5, rtol=1e-5)
    assert lp[0, 0] == 0


def test_head_only_sees_through_lora_and_disabled_adapters(model_and_batch):
    import copy

    from peft import LoraConfig, get_peft_model

    model, ids, attn, positions = model_and_batch
    peft = get_peft_model(
        copy.deepcopy(model),
        LoraConfig(r=4, target_modules=["q_proj", "v_proj"], init_lora_weights=False),
    )
    with torch.no_grad():
        fast, _ = sequence_logprobs(peft, ids, attn, 1.0, positions)
        full = sequence_logprobs(peft, ids, attn, 1.0)[0] * positions
        torch.testing.assert_close(fast, full, atol=1e-5, rtol=1e-5)
        with peft.disable_adapter():
            base_fast, _ = sequence_logprobs(peft, ids, attn, 1.0, positions)
        base = sequence_logprobs(model, ids, attn, 1.0, positions)[0]
    torch.testing.assert_close(base_fast, base, atol=1e-5, rtol=1e-5)
    assert not torch.allclose(fast, base_fast)  # the adapter does change the numbers
