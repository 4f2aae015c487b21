"""Checkpoints: exact resume, HF-loadable actor/critic, LoRA, corruption and safety checks."""

from __future__ import annotations

import json
import random
import shutil
import warnings

import numpy as np
import pytest
import torch
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import (
    AutoModelForCausalLM,
    AutoModelForTokenClassification,
    PreTrainedTokenizerFast,
    Qwen2Config,
    Qwen2ForCausalLM,
)

from ragen.trainer.checkpoint import (
    CheckpointError,
    CheckpointManager,
    CheckpointWarning,
    step_of,
)

VOCAB = 128


def tiny_config(**overrides) -> Qwen2Config:
    kwargs = dict(
        vocab_size=VOCAB,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
        tie_word_embeddings=True,
    )
    kwargs.update(overrides)
    return Qwen2Config(**kwargs)


def tiny_actor(seed: int = 0, **overrides) -> Qwen2ForCausalLM:
    torch.manual_seed(seed)
    return Qwen2ForCausalLM(tiny_config(**overrides)).eval()  # eval: no dropout randomness


def tiny_critic(seed: int = 1):
    torch.manual_seed(seed)
    return AutoModelForTokenClassification.from_config(tiny_config(num_labels=1)).eval()


def tiny_tokenizer() -> PreTrainedTokenizerFast:
    vocab = {f"t{i}": i for i in range(VOCAB - 4)}
    vocab.update({"<unk>": VOCAB - 4, "<pad>": VOCAB - 3, "<s>": VOCAB - 2, "</s>": VOCAB - 1})
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        unk_token="<unk>",
        pad_token="<pad>",
        bos_token="<s>",
        eos_token="</s>",
    )


def make_optim(model):
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=1e-2)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0 / (1 + s))
    return opt, sched


def train_step(model, opt, sched) -> float:
    """One update on a batch drawn from the global torch RNG (so RNG state matters)."""
    ids = torch.randint(0, VOCAB, (2, 8))
    loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    opt.step()
    sched.step()
    opt.zero_grad()
    return loss.item()


def rng_draws() -> tuple:
    return random.random(), float(np.random.rand()), float(torch.rand(()))


def params_of(model) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def assert_same_params(a, b):
    sa, sb = a.state_dict(), b.state_dict()
    assert sa.keys() == sb.keys()
    for k in sa:
        assert torch.equal(sa[k], sb[k]), k


IDS = torch.tensor([[1, 5, 9, 33, 7, 2]])


# --------------------------------------------------------------------------- round trip
def test_resume_continues_exactly_like_uninterrupted_training(tmp_path):
    random.seed(0)
    np.random.seed(0)
    actor, critic = tiny_actor(), tiny_critic()
    opt, sched = make_optim(actor)
    copt, csched = make_optim(critic)
    for _ in range(2):
        train_step(actor, opt, sched)
    manager = CheckpointManager(tmp_path)
    path = manager.save(
        2,
        actor=actor,
        tokenizer=tiny_tokenizer(),
        critic=critic,
        optimizers={"actor": opt, "critic": copt},
        schedulers={"actor": sched, "critic": csched},
        trainer_state={"seed_counter": 17, "best": 0.5},
        config={"model": {"lora": {"rank": 0}}, "algo": {"use_critic": True}},
    )
    assert path == tmp_path / "checkpoints" / "step_000002" and step_of(path) == 2
    # the uninterrupted run: two more steps plus RNG draws
    ref_losses = [train_step(actor, opt, sched) for _ in range(2)]
    ref_draws = rng_draws()

    # a "new process": different weights, fresh optimizer/scheduler, scrambled RNGs
    random.seed(123)
    np.random.seed(123)
    torch.manual_seed(123)
    actor2, critic2 = tiny_actor(seed=5), tiny_critic(seed=6)
    opt2, sched2 = make_optim(actor2)
    copt2, csched2 = make_optim(critic2)
    assert manager.latest() == path
    state = manager.load(
        path,
        actor=actor2,
        critic=critic2,
        optimizers={"actor": opt2, "critic": copt2},
        schedulers={"actor": sched2, "critic": csched2},
        config={"model": {"lora": {"rank": 0}}, "algo": {"use_critic": True}},
    )
    assert state == {"step": 2, "seed_counter": 17, "best": 0.5}
    assert_same_params(critic2, critic)
    assert sched2.last_epoch == 2
    losses = [train_step(actor2, opt2, sched2) for _ in range(2)]
    assert losses == ref_losses  # bit-identical: weights, Adam moments, lr schedule, batches
    assert rng_draws() == ref_draws
    assert_same_params(actor2, actor)


def test_saved_actor_and_critic_load_with_from_pretrained(tmp_path):
    actor, critic = tiny_actor(), tiny_critic()
    path = CheckpointManager(tmp_path).save(
        1, actor=actor, tokenizer=tiny_tokenizer(), critic=critic
    )
    assert (path / "actor" / "model.safetensors").is_file()
    loaded = AutoModelForCausalLM.from_pretrained(path / "actor")
    assert torch.equal(loaded.eval()(IDS).logits, actor(IDS).logits)
    # PreTrainedTokenizerFast, not AutoTokenizer: transformers 5 maps model_type qwen2 to a
    # BPE Qwen2Tokenizer that cannot represent this test's WordLevel vocabulary.
    tok = PreTrainedTokenizerFast.from_pretrained(path / "actor")
    assert tok("t1 t5 t9")["input_ids"] == [1, 5, 9]
    loaded_critic = AutoModelForTokenClassification.from_pretrained(path / "critic")
    assert torch.equal(loaded_critic.eval()(IDS).logits, critic(IDS).logits)
    manifest = json.loads((path / "manifest.json").read_text())
    assert {"actor/model.safetensors", "optim.pt", "rng.pt", "trainer_state.json"} <= set(
        manifest["files"]
    )


def test_plain_module_critic_round_trip(tmp_path):
    torch.manual_seed(0)
    head = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 1))
    manager = CheckpointManager(tmp_path)
    manager.save(3, actor=tiny_actor(), critic=head)
    torch.manual_seed(1)
    head2 = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 1))
    manager.load(3, actor=None, critic=head2, restore_rng=False)
    assert_same_params(head2, head)


# --------------------------------------------------------------------------- LoRA
def test_lora_actor_saves_adapter_and_merged_model(tmp_path):
    from peft import LoraConfig, PeftModel, get_peft_model

    lora = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], lora_dropout=0.0)
    actor = get_peft_model(tiny_actor(), lora).eval()
    opt, sched = make_optim(actor)
    train_step(actor, opt, sched)  # lora_B leaves zero, so merged != base
    before = params_of(actor)
    expected_logits = actor(IDS).logits
    manager = CheckpointManager(tmp_path)
    path = manager.save(1, actor=actor, tokenizer=tiny_tokenizer(), optimizers={"actor": opt})

    # the training model is untouched: still LoRA-wrapped, same weights
    assert isinstance(actor, PeftModel)
    assert all(torch.equal(v, before[k]) for k, v in actor.state_dict().items())
    assert (path / "actor_adapter" / "adapter_model.safetensors").is_file()
    merged = AutoModelForCausalLM.from_pretrained(path / "actor").eval()
    assert not any("lora" in k for k in merged.state_dict())
    torch.testing.assert_close(merged(IDS).logits, expected_logits, atol=1e-5, rtol=1e-5)

    # resume: a fresh LoRA model over the same base gets the trained adapter back
    actor2 = get_peft_model(tiny_actor(), lora).eval()
    opt2, _ = make_optim(actor2)
    manager.load(path, actor=actor2, optimizers={"actor": opt2})
    assert_same_params(actor2, actor)
    # a plain (non-LoRA) model can take the merged weights, e.g. for evaluation
    plain = tiny_actor(seed=9)
    manager.load(path, actor=plain, restore_rng=False)
    torch.testing.assert_close(plain(IDS).logits, expected_logits, atol=1e-5, rtol=1e-5)


# --------------------------------------------------------------------------- corruption
def flip_byte(file, offset=-10):
    data = bytearray(file.read_bytes())
    data[offset] ^= 0xFF
    file.write_bytes(bytes(data))


def test_corrupt_weights_are_detected_not_skipped(tmp_path):
    manager = CheckpointManager(tmp_path)
    actor = tiny_actor()
    manager.save(1, actor=actor)
    newest = manager.save(2, actor=actor)
    assert manager.latest() == newest  # verified + cached
    flip_byte(newest / "actor" / "model.safetensors")
    with pytest.raises(CheckpointError) as err:
        manager.latest()
    msg = str(err.value)
    assert "step_000002" in msg and "actor/model.safetensors" in msg and "sha256" in msg
    assert "Delete" in msg
    with pytest.raises(CheckpointError):
        manager.load(newest, actor=tiny_actor())
    # following the advice falls back to the previous checkpoint
    shutil.rmtree(newest)
    assert manager.latest() == tmp_path / "checkpoints" / "step_000001"


def test_missing_manifest_and_missing_file_are_errors(tmp_path):
    manager = CheckpointManager(tmp_path)
    path = manager.save(4, actor=tiny_actor())
    (path / "rng.pt").unlink()
    with pytest.raises(CheckpointError, match="rng.pt is missing"):
        manager.latest()
    (path / "manifest.json").unlink()
    with pytest.raises(CheckpointError, match=r"step_000004 has no manifest\.json"):
        manager.latest()


def test_size_only_verification_still_catches_truncation(tmp_path):
    manager = CheckpointManager(tmp_path, verify="size")
    path = manager.save(1, actor=tiny_actor())
    file = path / "optim.pt"
    file.write_bytes(file.read_bytes()[:-1])
    with pytest.raises(CheckpointError, match="optim.pt has"):
        manager.latest()


def test_leftover_tmp_folder_is_ignored_and_reported_once(tmp_path):
    manager = CheckpointManager(tmp_path)
    good = manager.save(1, actor=tiny_actor())
    (tmp_path / "checkpoints" / "step_000002.tmp" / "actor").mkdir(parents=True)
    with pytest.warns(CheckpointWarning, match="step_000002.tmp"):
        assert manager.latest() == good
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert manager.list() == [good]  # reported only once
    # saving that step again replaces the leftover
    assert manager.save(2, actor=tiny_actor()).name == "step_000002"


# --------------------------------------------------------------------------- safety
def test_existing_step_is_never_overwritten_silently(tmp_path):
    manager = CheckpointManager(tmp_path)
    manager.save(5, actor=tiny_actor(), trainer_state={"v": 1})
    with pytest.raises(CheckpointError, match="already exists.*overwrite=True"):
        manager.save(5, actor=tiny_actor(), trainer_state={"v": 2})
    assert manager.load(5, actor=tiny_actor())["v"] == 1
    manager.save(5, actor=tiny_actor(), trainer_state={"v": 2}, overwrite=True)
    assert manager.load(5, actor=tiny_actor())["v"] == 2
    assert [p.name for p in (tmp_path / "checkpoints").iterdir()] == ["step_000005"]


def test_keep_last_deletes_older_checkpoints(tmp_path):
    manager = CheckpointManager(tmp_path, keep_last=2)
    actor = tiny_actor()
    for step in (10, 20, 30, 40):
        manager.save(step, actor=actor)
    assert [step_of(p) for p in manager.list()] == [30, 40]


def test_incompatible_config_lists_differences(tmp_path):
    manager = CheckpointManager(tmp_path)
    cfg = {"model": {"lora": {"rank": 0}}, "algo": {"use_critic": True}}
    manager.save(1, actor=tiny_actor(), config=cfg)
    now = {"model": {"lora": {"rank": 8}}, "algo": {"use_critic": False}}
    with pytest.raises(CheckpointError) as err:
        manager.load(1, actor=tiny_actor(), config=now)
    msg = str(err.value)
    assert "model.lora.rank: checkpoint=0, now=8" in msg
    assert "algo.use_critic: checkpoint=True, now=False" in msg


def test_shape_mismatch_is_a_short_error_and_leaves_model_untouched(tmp_path):
    manager = CheckpointManager(tmp_path)
    manager.save(1, actor=tiny_actor())
    other = tiny_actor(seed=3, vocab_size=VOCAB + 8)
    before = params_of(other)
    with pytest.raises(CheckpointError) as err:
        manager.load(1, actor=other)
    msg = str(err.value)
    assert "shape mismatch" in msg and "model.embed_tokens.weight" in msg
    assert len(msg) < 600  # a summary, not a page of keys
    assert all(torch.equal(v, before[k]) for k, v in other.state_dict().items())


def test_bad_arguments_give_clear_errors(tmp_path):
    manager = CheckpointManager(tmp_path)
    with pytest.raises(TypeError, match="trainer_state must be JSON-serializable"):
        manager.save(1, actor=tiny_actor(), trainer_state={"x": torch.ones(2)})
    assert manager.list() == []
    with pytest.raises(FileNotFoundError, match="step_000009 does not exist"):
        manager.load(9, actor=tiny_actor())
    manager.save(1, actor=tiny_actor(), optimizers={"actor": make_optim(tiny_actor())[0]})
    with pytest.raises(CheckpointError, match="no state for optimizers.*'critic'"):
        manager.load(1, actor=tiny_actor(), optimizers={"critic": make_optim(tiny_actor())[0]})
    with pytest.raises(ValueError, match="keep_last"):
        CheckpointManager(tmp_path, keep_last=0)
