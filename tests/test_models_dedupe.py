"""Identical rows and identical prompts computed once give the full forward's numbers."""

import pytest
import torch

from ragen.models.logprobs import (
    duplicate_rows,
    prompt_groups,
    sequence_logprobs,
)


@pytest.fixture(scope="module")
def model(tiny_model_dir):
    from ragen.models import load_policy

    model, _ = load_policy(tiny_model_dir, device="cpu", dtype=torch.float32)
    return model


def _batch():
    """8 right-padded rows: a 20-id system prefix, one of three prompts (9, 6 and 11 ids),
    a response of 3-7 ids; rows 5 and 6 are copies of rows 0 and 2 (a group's episodes
    that played the same turn the same way)."""
    g = torch.Generator().manual_seed(3)
    prefix = torch.randint(5, 200, (20,), generator=g).tolist()
    prompts = [torch.randint(5, 200, (n,), generator=g).tolist() for n in (9, 6, 11)]
    rows, wanted = [], []
    for prompt, reply in [(0, 5), (0, 3), (1, 7), (2, 4), (1, 5), (0, 5), (1, 7), (2, 6)]:
        response = torch.randint(5, 200, (reply,), generator=g).tolist()
        rows.append(prefix + prompts[prompt] + response)
        wanted.append(len(prefix) + len(prompts[prompt]))
    rows[5], rows[6] = list(rows[0]), list(rows[2])
    width = max(map(len, rows))
    ids = torch.zeros(len(rows), width, dtype=torch.long)
    attn = torch.zeros_like(ids)
    positions = torch.zeros(len(rows), width)
    for i, (row, start) in enumerate(zip(rows, wanted)):
        ids[i, : len(row)] = torch.tensor(row)
        attn[i, : len(row)] = 1
        positions[i, start : len(row)] = 1
    return ids, attn, positions


def test_duplicate_rows_and_prompt_groups_find_the_copies():
    ids, attn, positions = _batch()
    first, inverse = duplicate_rows(ids, attn, positions)
    assert len(first) == 6  # rows 5 and 6 are copies
    assert torch.equal(ids[first][inverse], ids)
    split, members, group = prompt_groups(ids, attn, positions, shared=20)
    assert len(members) == 3 and group.tolist() == [0, 0, 1, 2, 1, 0, 1, 2]
    assert split.tolist()[:4] == [29, 29, 26, 31]
    different = positions.clone()
    different[5, int(attn[5].sum()) - 1] = 0  # same ids, another wanted mask: no copy
    assert len(duplicate_rows(ids, attn, different)[0]) == 7


def _run(fn, model):
    model.zero_grad()
    out = fn()
    loss = sum(o.float().sum() for o in out if o is not None)
    loss.backward()
    return [o.detach() for o in out if o is not None], [p.grad.clone() for p in model.parameters()]


def test_logprobs_by_groups_equal_the_plain_forward(model):
    ids, attn, positions = _batch()
    calls = []
    hook = model.model.register_forward_pre_hook(
        lambda mod, args, kwargs: calls.append(tuple(kwargs["input_ids"].shape)),
        with_kwargs=True,
    )
    try:
        fast, fast_grads = _run(
            lambda: sequence_logprobs(model, ids, attn, 0.7, positions, with_entropy=True), model
        )
    finally:
        hook.remove()
    # the prefix once, the 3 prompts once (11 ids wide), the 6 distinct rows' replies
    assert calls == [(1, 20), (3, 11), (6, 7)]
    plain, plain_grads = _run(
        lambda: sequence_logprobs(
            model, ids, attn, 0.7, positions, with_entropy=True, dedupe=False, share_prefix=False
        ),
        model,
    )
    for a, b in zip(fast, plain):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
    for a, b in zip(fast_grads, plain_grads):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4)
    model.zero_grad()


def test_critic_values_by_groups_equal_the_plain_forward(model):
    from ragen.models.value import create_critic
    from ragen.trainer.starpo import token_values

    ids, attn, positions = _batch()
    critic = create_critic(model)
    with torch.no_grad():  # a nonzero head, so values and gradients are not all 0
        critic.score.weight.normal_(std=0.5, generator=torch.Generator().manual_seed(0))
        critic.score.bias.fill_(0.1)

    def masked(wanted):  # values where wanted (the advantage mask), V(whole row)
        values, final = token_values(critic, ids, attn, wanted)
        return values * positions, final

    fast, fast_grads = _run(lambda: masked(positions), critic)
    plain, plain_grads = _run(lambda: masked(None), critic)
    for a, b in zip(fast, plain):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
    for a, b in zip(fast_grads, plain_grads):
        torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-3)
