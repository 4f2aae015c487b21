"""The LM head run only at wanted positions gives the full forward pass's numbers."""

import pytest
import torch

from ragen.models.logprobs import sequence_logprobs, split_head, token_logprobs


@pytest.fixture(scope="module")
def model_and_batch(tiny_model_dir):
    from ragen.models import load_policy

    torch.manual_seed(0)
    # on the CPU wherever the suite runs: the batch below is built there, and the
    # tolerances are float32's (this is the math of the fast path, not a device test)
    model, tok = load_policy(tiny_model_dir, device="cpu", dtype=torch.float32)
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


def _shared_batch(model_and_batch):
    """The batch with a common 20-id prefix (a system prompt) in front of every row."""
    model, ids, attn, positions = model_and_batch
    prefix = torch.randint(5, 200, (1, 20), generator=torch.Generator().manual_seed(2))
    ids = torch.cat([prefix.expand(3, -1), ids], dim=1)
    attn = torch.cat([torch.ones(3, 20, dtype=attn.dtype), attn], dim=1)
    positions = torch.cat([torch.zeros(3, 20), positions], dim=1)
    return model, ids, attn, positions


def test_shared_prefix_length():
    from ragen.models.logprobs import shared_prefix_length

    ids = torch.tensor([[1, 2, 3, 4, 5], [1, 2, 3, 9, 5], [1, 2, 3, 4, 0]])
    attn = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 1, 1], [1, 1, 1, 1, 0]])
    none = torch.zeros(3, 5)
    assert shared_prefix_length(ids, attn, none) == 3
    late = torch.zeros(3, 5)
    late[1, 3] = 1  # token 3 is wanted: its predictor, column 2, runs per row
    assert shared_prefix_length(ids, attn, late) == 2
    assert shared_prefix_length(ids[:1], attn[:1], none[:1]) == 0  # one row: nothing shared
    attn[1, 0] = 0  # a padded column is not shared
    assert shared_prefix_length(ids, attn, none) == 0


def test_shared_prefix_runs_once_with_the_same_values_and_gradients(model_and_batch):
    from ragen.models import logprobs

    model, ids, attn, positions = _shared_batch(model_and_batch)
    assert logprobs.shared_prefix_length(ids, attn, positions) >= logprobs.MIN_SHARED_PREFIX
    calls = []
    hook = model.model.register_forward_pre_hook(
        lambda mod, args, kwargs: calls.append(kwargs["input_ids"].shape), with_kwargs=True
    )
    results = {}
    try:
        for share in (True, False):
            model.zero_grad()
            lp, ent = sequence_logprobs(
                model, ids, attn, 0.7, positions, with_entropy=True, share_prefix=share
            )
            (lp.sum() + 0.1 * ent.sum()).backward()
            results[share] = (lp, ent, [p.grad.clone() for p in model.parameters()])
    finally:
        hook.remove()
        model.zero_grad()
    assert calls[:2] == [torch.Size([1, 20]), torch.Size([3, 24])]  # prefix once, then the rest
    assert calls[2] == torch.Size([3, 44])
    (lp, ent, grads), (lp_ref, ent_ref, grads_ref) = results[True], results[False]
    torch.testing.assert_close(lp, lp_ref, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(ent, ent_ref, atol=1e-5, rtol=1e-5)
    for a, b in zip(grads, grads_ref):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4)


def test_shared_prefix_with_lora_and_without_gradient_checkpointing(model_and_batch):
    import copy

    from peft import LoraConfig, get_peft_model

    from ragen.models.logprobs import prefix_sharing_allowed, split_head

    model, ids, attn, positions = _shared_batch(model_and_batch)
    peft = get_peft_model(
        copy.deepcopy(model),
        LoraConfig(r=4, target_modules=["q_proj", "v_proj"], init_lora_weights=False),
    )
    with torch.no_grad():
        shared, _ = sequence_logprobs(peft, ids, attn, 1.0, positions)
        alone, _ = sequence_logprobs(peft, ids, attn, 1.0, positions, share_prefix=False)
    torch.testing.assert_close(shared, alone, atol=1e-5, rtol=1e-5)
    local = copy.deepcopy(model)
    local.gradient_checkpointing_enable()
    local.train()
    backbone = split_head(local)[0]
    assert not prefix_sharing_allowed(backbone)  # transformers would drop the cache: full forward
    lp, _ = sequence_logprobs(local, ids, attn, 1.0, positions)
    lp.sum().backward()  # runs (the full forward) and trains
    with torch.no_grad():
        expected, _ = sequence_logprobs(model, ids, attn, 1.0, positions, share_prefix=False)
    torch.testing.assert_close(lp.detach(), expected, atol=1e-5, rtol=1e-5)


def test_critic_values_share_the_prefix_with_the_same_values_and_gradients(model_and_batch):
    from ragen.models.value import create_critic
    from ragen.trainer.starpo import token_values

    model, ids, attn, positions = _shared_batch(model_and_batch)
    critic = create_critic(model)
    with torch.no_grad():  # a nonzero head, so values and gradients are not all 0
        critic.score.weight.normal_(std=0.5)
        critic.score.bias.fill_(0.1)
    results = []
    for wanted in (positions, None):  # with positions: the prefix runs once
        critic.zero_grad()
        values, final = token_values(critic, ids, attn, wanted)
        (values * positions).sum().add(final.sum()).backward()
        results.append((values * positions, final, [p.grad.clone() for p in critic.parameters()]))
    (v, f, g), (v_ref, f_ref, g_ref) = results
    torch.testing.assert_close(v, v_ref, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(f, f_ref, atol=1e-5, rtol=1e-5)
    for a, b in zip(g, g_ref):  # (gradients here are O(1): rounding reaches ~2e-5)
        torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-3)


def test_shared_prefix_is_skipped_where_dropout_is_active(model_and_batch):
    import copy

    from ragen.models.logprobs import prefix_sharing_allowed, split_head

    local = copy.deepcopy(model_and_batch[0])
    backbone = split_head(local)[0]
    local.train()
    assert prefix_sharing_allowed(backbone)  # the tiny model has no dropout
    local.config.attention_dropout = 0.1
    assert not prefix_sharing_allowed(backbone)
    local.eval()
    assert prefix_sharing_allowed(backbone)  # no dropout at evaluation
