"""SFT warm start: loss only on assistant tokens, LoRA adapters, merge."""

from dataclasses import replace

import pytest
import torch

from ragen.agent.rollout import RolloutConfig
from ragen.batching import collate
from ragen.models.lora import merge_adapter
from ragen.sft.config import SFTConfig
from ragen.sft.expert_data import SFT_SEED_STEP, make_expert_data
from ragen.sft.trainer import run_sft, sft_loss


def _load(path):
    from ragen.models import load_policy

    return load_policy(path, device="cpu", dtype=torch.float32)  # CPU tensors below


def test_expert_data_masks_exactly_the_assistant_tokens(tiny_model_dir):
    model, tok = _load(tiny_model_dir)
    data = make_expert_data(
        tok,
        SFTConfig(
            env="sokoban",
            episodes=4,
            actions_per_turn=2,
            rollout=RolloutConfig(max_actions_per_turn=2),
        ),
    )
    assert len(data) == 4
    for traj in data:
        ids = traj.input_ids
        masked = [i for i, m in zip(ids, traj.response_mask) if m]
        # the trained tokens decode to exactly the assistant replies, nothing from the prompts
        replies = "".join(t.response for t in traj.turns)
        assert tok.decode(masked) == replies
        assert "<answer>" in replies and "State:" not in tok.decode(masked)
        # the prompts are the RL rollout's: both budgets shown
        assert traj.turns[0].prompt.startswith("Turn 1 of 5:\n")
        assert "You have 10 actions left" in traj.turns[0].prompt


def test_windowed_expert_data_is_one_sample_per_turn_with_only_the_current_state(tiny_model_dir):
    _, tok = _load(tiny_model_dir)
    cfg = dict(env="sokoban", episodes=3, actions_per_turn=1)
    shape = RolloutConfig(max_actions_per_turn=1, max_turns=4)
    full = make_expert_data(tok, SFTConfig(**cfg, rollout=shape))
    windowed = make_expert_data(tok, SFTConfig(**cfg, rollout=replace(shape, context_window=0)))
    # the same episodes (same seeds, same expert), cut into one sample per answered turn
    assert len(windowed) == sum(t.num_turns for t in full) > len(full)
    for sample in windowed:
        trained = tok.decode([i for i, m in zip(sample.input_ids, sample.response_mask) if m])
        assert trained == sample.turns[sample.turn_index].response  # only this turn's reply
        # the prompt holds one grid: no earlier turn's state or reply
        assert tok.decode(sample.input_ids).count("<|im_start|>assistant") == 1


def test_sft_loss_ignores_prompt_tokens(tiny_model_dir):
    model, tok = _load(tiny_model_dir)
    (traj,) = make_expert_data(
        tok, SFTConfig(env="bandit", episodes=1, rollout=RolloutConfig(max_turns=1))
    )
    batch = collate([traj], pad_id=tok.pad_token_id)
    ids, mask = batch.input_ids, batch.response_mask
    nll, count = sft_loss(model, batch)
    assert count == mask[:, 1:].sum()
    # changing a prompt token's label-side never changes which positions are scored
    prompt_pos = int((mask[0] == 0).nonzero()[5])
    batch2 = replace(batch, response_mask=mask.clone())
    batch2.response_mask[0, prompt_pos] = 0.0
    assert torch.equal(sft_loss(model, batch2)[0], nll)
    # and the loss equals a hand-written masked NLL
    logits = model(input_ids=ids).logits[:, :-1]
    logp = torch.log_softmax(logits.float(), -1).gather(-1, ids[:, 1:, None])[..., 0]
    assert torch.allclose(nll, -(logp * mask[:, 1:]).sum(), atol=1e-4)


def test_sft_learns_and_lora_merges(tiny_model_dir, tmp_path):
    cfg = SFTConfig(
        env="bandit",
        rollout=RolloutConfig(max_turns=1),
        episodes=16,
        epochs=2,
        batch_size=8,
        lr=3e-3,
        lora_rank=4,
    )
    out = run_sft(tiny_model_dir, tmp_path / "sft", cfg, log=lambda *_: None)
    lines = (out / "sft_metrics.jsonl").read_text().splitlines()
    import json

    losses = [json.loads(x)["loss"] for x in lines]
    assert losses[-1] < losses[0]
    # the merged model equals base + adapter
    merged, _ = _load(str(out))
    again = merge_adapter(tiny_model_dir, out / "adapter", tmp_path / "merged")
    remerged, _ = _load(str(again))
    for (n, a), (_, b) in zip(merged.state_dict().items(), remerged.state_dict().items()):
        assert torch.allclose(a, b, atol=1e-6), n


def test_lora_adapters_are_the_only_trainable_parameters(tiny_model_dir):
    from ragen.models.lora import LoraConfig, apply_lora

    model, _ = _load(tiny_model_dir)
    wrapped = apply_lora(model, LoraConfig(rank=4))
    trainable = [n for n, p in wrapped.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in n for n in trainable)


def test_more_expert_actions_than_the_prompt_allows_is_a_clear_error(tiny_model_dir):
    from ragen.models import load_tokenizer

    tok = load_tokenizer(tiny_model_dir)
    cfg = SFTConfig(
        env="sokoban", episodes=2, actions_per_turn=3, rollout=RolloutConfig(max_actions_per_turn=2)
    )
    with pytest.raises(ValueError, match="max-actions-per-turn"):
        make_expert_data(tok, cfg)


def test_length_split_micro_batches_leave_the_sft_gradient_unchanged(tiny_model_dir):
    # the grids' SFT mix: move samples beside longer auxiliary-reply samples
    from ragen.batching import micro_batches
    from ragen.sft.expert_data import auxiliary_config
    from ragen.sft.trainer import SFT_MIN_FILL

    model, tok = _load(tiny_model_dir)
    rollout = RolloutConfig(
        max_turns=3, context_window=0, reasoning="no_think", prompt_style="compact"
    )
    cfg = SFTConfig(env="sokoban", episodes=4, rollout=rollout, aux_reasoning="grounding",
                    aux_episodes=4)  # fmt: skip
    rows = make_expert_data(tok, cfg) + make_expert_data(tok, auxiliary_config(cfg))
    batch = collate(rows, pad_id=tok.pad_token_id)
    total = float(batch.response_mask.sum())

    def grads(min_fill):
        model.zero_grad()
        packs = micro_batches(batch, range(batch.size), 1 << 20, min_fill)
        for _, mb in packs:
            (sft_loss(model, mb)[0] / total).backward()
        return len(packs), torch.cat([p.grad.flatten() for p in model.parameters()])

    one, whole = grads(0.0)
    several, split = grads(SFT_MIN_FILL)
    assert one == 1 and several > 1  # the two length modes went to their own packs
    assert torch.allclose(whole, split, atol=1e-6, rtol=1e-4)


def test_sft_stops_once_it_solves_the_asked_share_of_its_own_states(
    tiny_model_dir, tmp_path, monkeypatch
):
    import json

    import ragen.sft.trainer as sft_trainer

    checks = iter([0.10, 0.30, 0.55, 0.9])  # success measured at steps 2, 4, 6, ...
    seen = []

    def fake_success(model, tokenizer, env, env_config, rollout, seed, step, episodes, temp):
        seen.append((env, seed, step, episodes, temp))
        return next(checks)

    monkeypatch.setattr(sft_trainer, "training_state_success", fake_success)
    cfg = SFTConfig(
        env="bandit", rollout=RolloutConfig(max_turns=1), episodes=32, epochs=3, batch_size=4,
        stop_at_success=0.5, success_check_every=2, success_check_episodes=16,
    )  # fmt: skip
    out = run_sft(tiny_model_dir, tmp_path / "sft", cfg, log=lambda *_: None)
    records = [json.loads(x) for x in (out / "sft_metrics.jsonl").read_text().splitlines()]
    assert len(records) == 6  # of 24: stopped after the third check (0.55 >= 0.5)
    assert records[-1]["stopped_at_success"] == 0.55
    assert [r.get("sft_state_success") for r in records if "sft_state_success" in r] == [
        0.10, 0.30, 0.55,
    ]  # fmt: skip
    # its own SFT states (the training seeds' step), at the evaluation's temperature
    assert seen[0] == ("bandit", 0, SFT_SEED_STEP, 16, 0.5)
    assert (out / "model.safetensors").exists()


def test_training_state_success_is_a_deterministic_share(tiny_model_dir):
    from ragen.sft.expert_data import SFT_SEED_STEP, training_state_success

    model, tok = _load(tiny_model_dir)
    args = (model, tok, "bandit", {}, RolloutConfig(max_turns=1, max_new_tokens=8), 0,
            SFT_SEED_STEP, 8, 1.0)  # fmt: skip
    first = training_state_success(*args)
    assert 0.0 <= first <= 1.0 and first * 8 == int(first * 8)
    assert training_state_success(*args) == first


@pytest.mark.parametrize(
    "change, match",
    [
        ({"stop_at_success": 1.5}, "stop_at_success"),
        ({"stop_at_success": 0.4, "success_check_every": 0}, "success_check_every"),
        ({"success_check_temperature": float("nan")}, "success_check_temperature"),
    ],
)
def test_bad_stop_settings_are_refused(change, match):
    from ragen.errors import ConfigError

    with pytest.raises(ConfigError, match=match):
        replace(SFTConfig(env="bandit", rollout=RolloutConfig(max_turns=1)), **change).validate()
