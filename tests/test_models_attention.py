"""The training forward's grouped-query attention (``ragen.models.attention``): the
numbers of transformers' own SDPA path, K/V heads read in place, only inside the
forward, and never saved into a model's config."""

import json

import pytest
import torch

import ragen.models.attention as attention
from ragen.models.logprobs import sequence_logprobs
from ragen.trainer.forward import token_log_probs, token_values


@pytest.fixture(scope="module")
def model_and_batch(tiny_model_dir):
    from ragen.models import load_policy

    model, tok = load_policy(tiny_model_dir, device="cpu", dtype=torch.float32)
    assert model.config.num_key_value_heads < model.config.num_attention_heads  # GQA
    assert model.config._attn_implementation == "sdpa"
    g = torch.Generator().manual_seed(3)
    ids = torch.randint(5, len(tok), (4, 40), generator=g)
    ids[:, :20] = ids[0, :20]  # a shared prompt prefix: the K/V-cache path runs too
    attn = torch.ones_like(ids)
    attn[1, 33:] = 0  # right padding
    attn[3, 28:] = 0
    positions = torch.zeros(4, 40)
    positions[:, 24:27] = 1
    positions[0, 30:38] = 1
    return model, ids, attn, positions


def _grads(model, run):
    model.zero_grad()
    lp, ent = run()
    (lp.sum() + 0.1 * ent.sum()).backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad()
    return lp.detach(), ent.detach(), grads


def test_gqa_training_forward_equals_transformers_sdpa_in_values_and_gradients(
    model_and_batch, monkeypatch
):
    model, ids, attn, positions = model_and_batch
    calls = []
    real = attention.gqa_sdpa_attention

    def counted(*args, **kwargs):
        calls.append(args[1].shape)  # the query
        return real(*args, **kwargs)

    monkeypatch.setattr(attention, "gqa_sdpa_attention", counted)
    attention._register.cache_clear()  # register the counted one
    ours = _grads(model, lambda: token_log_probs(model, ids, attn, 1.0, positions, True))
    assert calls, "the CPU training forward of a GQA model did not take the GQA path"
    assert model.config._attn_implementation == "sdpa"  # restored after the forward
    theirs = _grads(model, lambda: sequence_logprobs(model, ids, attn, 1.0, positions, True))
    torch.testing.assert_close(ours[0], theirs[0], atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(ours[1], theirs[1], atol=1e-6, rtol=1e-6)
    for name, grad in ours[2].items():  # the K/V gradients sum heads in another order
        torch.testing.assert_close(grad, theirs[2][name], atol=1e-6, rtol=1e-5, msg=name)
    monkeypatch.undo()
    attention._register.cache_clear()  # the real function again for later tests


def test_critic_forward_takes_the_same_path_and_values(tiny_model_dir, model_and_batch):
    from ragen.models.value import create_critic, critic_values

    _, ids, attn, positions = model_and_batch
    critic = create_critic(tiny_model_dir, device="cpu", dtype=torch.float32)
    values, final = token_values(critic, ids, attn, positions)
    plain = critic_values(critic, ids, attn, positions)
    torch.testing.assert_close(values[:, 1:], plain[:, :-1], atol=1e-6, rtol=1e-6)
    assert final.shape == (4,)


def test_the_model_is_left_alone_off_the_cpu_without_gqa_or_sdpa(model_and_batch):
    model, *_ = model_and_batch
    config = model.config
    with attention.training_attention(model):
        assert config._attn_implementation == attention.TRAINING_ATTENTION
    assert config._attn_implementation == "sdpa"
    config._attn_implementation = "eager"  # another implementation: not ours to replace
    try:
        with attention.training_attention(model):
            assert config._attn_implementation == "eager"
    finally:
        config._attn_implementation = "sdpa"
    heads = config.num_key_value_heads
    config.num_key_value_heads = config.num_attention_heads  # no groups: nothing to win
    try:
        with attention.training_attention(model):
            assert config._attn_implementation == "sdpa"
    finally:
        config.num_key_value_heads = heads


def test_a_checkpoint_saved_after_training_names_sdpa(model_and_batch, tmp_path):
    model, ids, attn, positions = model_and_batch
    with torch.no_grad():
        token_log_probs(model, ids, attn, 1.0, positions)
    model.save_pretrained(tmp_path)
    saved = json.loads((tmp_path / "config.json").read_text())
    assert attention.TRAINING_ATTENTION not in json.dumps(saved)
