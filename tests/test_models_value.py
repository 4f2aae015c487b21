"""The critic: zero-initialized value head on the policy backbone, HF save/load."""

from __future__ import annotations

import copy

import pytest
import torch

from ragen.models import create_critic, critic_values, load_critic
from ragen.models.tiny import build_model, build_tokenizer


@pytest.fixture(scope="module")
def policy():
    tok = build_tokenizer("chatml")
    return build_model("nano", tok, seed=0), tok


def _batch():
    ids = torch.tensor([[5, 6, 7, 8, 9], [0, 0, 7, 8, 9]])
    mask = torch.tensor([[1, 1, 1, 1, 1], [0, 0, 1, 1, 1]])
    return ids, mask


def test_initial_values_are_zero_and_backbone_copied(policy):
    model, _ = policy
    critic = create_critic(model)
    ids, mask = _batch()
    values = critic_values(critic, ids, mask)
    assert values.shape == (2, 5) and values.dtype == torch.float32
    assert torch.count_nonzero(values) == 0
    for (k, a), (_, b) in zip(model.model.state_dict().items(), critic.model.state_dict().items()):
        assert torch.equal(a, b), k
    # a copy: training the critic must not touch the policy
    assert critic.model.embed_tokens.weight.data_ptr() != model.model.embed_tokens.weight.data_ptr()


def test_head_gets_gradients_and_padding_invariance(policy):
    model, _ = policy
    critic = create_critic(model).train()
    ids, mask = _batch()
    critic_values(critic, ids, mask).sum().backward()
    assert critic.score.weight.grad.abs().sum() > 0
    torch.nn.init.normal_(critic.score.weight, std=0.1)
    critic.eval()
    with torch.no_grad():
        padded = critic_values(critic, ids, mask)[1, 2:]
        alone = critic_values(critic, ids[1:, 2:], mask[1:, 2:])[0]
    assert torch.allclose(padded, alone, atol=1e-5)


def test_save_load_round_trip(policy, tmp_path):
    model, _ = policy
    critic = create_critic(model)
    torch.nn.init.normal_(critic.score.weight, std=0.1)
    critic.save_pretrained(tmp_path / "critic")
    ids, mask = _batch()
    # a path means device "auto" (CUDA and bf16 on a GPU machine): these CPU tensors and
    # float32 tolerances need the CPU
    with torch.no_grad():
        expected = critic_values(critic, ids, mask)
        loaded = load_critic(tmp_path / "critic", device="cpu")
        assert torch.allclose(critic_values(loaded, ids, mask), expected)
        # create_critic on a saved critic keeps its trained head
        again = create_critic(tmp_path / "critic", device="cpu")
        assert torch.allclose(critic_values(again, ids, mask), expected)


def test_create_from_policy_folder(policy, tmp_path):
    model, tok = policy
    model.save_pretrained(tmp_path / "policy")
    tok.save_pretrained(tmp_path / "policy")
    critic = create_critic(tmp_path / "policy", device="cpu")  # a path alone means "auto"
    ids, mask = _batch()
    with torch.no_grad():
        assert torch.count_nonzero(critic_values(critic, ids, mask)) == 0
    assert torch.equal(critic.model.norm.weight, model.model.norm.weight)


def test_create_from_peft_policy(policy):
    peft = pytest.importorskip("peft")
    import copy

    model, _ = policy
    wrapped = peft.get_peft_model(
        copy.deepcopy(model), peft.LoraConfig(r=2, target_modules=["q_proj", "v_proj"])
    )
    critic = create_critic(wrapped)
    q = critic.model.layers[0].self_attn.q_proj.weight
    assert torch.equal(q, model.model.layers[0].self_attn.q_proj.weight)


def test_bad_input():
    with pytest.raises(TypeError, match="model path or a transformers model"):
        create_critic(42)


def test_critic_of_a_model_object_sits_beside_it(policy):
    # device/dtype unset: the policy's own (not "auto", which would pick CUDA on a GPU
    # machine while the actor it was copied from stays where the caller put it)
    model, _ = policy
    half = create_critic(copy.deepcopy(model).to(torch.bfloat16))
    assert next(half.parameters()).dtype == torch.bfloat16
    assert next(half.parameters()).device == next(model.parameters()).device
    assert next(create_critic(model, dtype="float32").parameters()).dtype == torch.float32
