"""HFEngine: batched sampling, stop handling, log-probs, reproducibility (tiny nano model)."""

from __future__ import annotations

import pytest
import torch

from ragen.engines.base import SamplingParams
from ragen.engines.hf import HFEngine, sample_next_token
from ragen.models.logprobs import token_logprobs
from ragen.models.tiny import build_model, build_tokenizer


@pytest.fixture(scope="module")
def tok():
    return build_tokenizer("chatml")


@pytest.fixture(scope="module")
def model(tok):
    return build_model("nano", tok, seed=0)


@pytest.fixture
def bias(model):
    """Add a logit bias to chosen token ids (hooked on the lm_head output; removed after)."""
    handles = []

    def apply(values: dict[int, float]):
        vec = torch.zeros(model.config.vocab_size)
        for token_id, value in values.items():
            vec[token_id] = value
        handles.append(model.lm_head.register_forward_hook(lambda mod, inp, out: out + vec))

    yield apply
    for h in handles:
        h.remove()


def _prompts(tok):
    texts = ["Turn 1:\nState:\n#P_X#", "You have 5 actions left.", "go", "Using the numbers [3, 5]"]
    return [tok.encode(t) for t in texts]


def _recomputed(model, prompt, gen, temperature):
    ids = torch.tensor([prompt + gen.token_ids])
    with torch.no_grad():
        return token_logprobs(model, ids, temperature=temperature)[0, len(prompt) :]


def test_stop_at_answer_per_sequence_and_logprobs_match(model, tok, bias):
    answer = tok.convert_tokens_to_ids("</answer>")
    bias({answer: 4.5})  # rows close </answer> at different steps
    prompts = _prompts(tok)
    engine = HFEngine(model, tok)
    params = SamplingParams(temperature=0.8, top_p=0.95, top_k=200, max_new_tokens=24, seed=1)
    gens = engine.generate(prompts, params)
    reasons = [g.finish_reason for g in gens]
    assert "stop" in reasons
    assert len({len(g.token_ids) for g in gens}) > 1  # rows ended at different steps
    for prompt, gen in zip(prompts, gens):
        assert len(gen.token_ids) == len(gen.logprobs)
        if gen.finish_reason == "stop":
            assert gen.token_ids[-1] == answer and answer not in gen.token_ids[:-1]
            assert gen.text.endswith("</answer>")
        else:
            assert gen.finish_reason in ("length", "eos")
            assert answer not in gen.token_ids
        # log-probs from the left-padded, row-dropping batch == an unpadded forward pass
        expected = _recomputed(model, prompt, gen, temperature=0.8)
        assert torch.allclose(torch.tensor(gen.logprobs), expected, atol=1e-4)


def test_multi_token_stop_string(model, tok, bias):
    think_end, answer_open = tok.convert_tokens_to_ids(["</think>", "<answer>"])
    bias({think_end: 8.0, answer_open: 8.0})
    params = SamplingParams(
        temperature=1.0, max_new_tokens=30, stop_strings=["</think><answer>"], seed=3
    )
    gens = HFEngine(model, tok).generate(_prompts(tok), params)
    assert any(g.finish_reason == "stop" for g in gens)
    for g in gens:
        full = tok.decode(g.token_ids)
        if g.finish_reason == "stop":
            assert full.endswith("</think><answer>")
            assert "</think><answer>" not in tok.decode(g.token_ids[:-1])
        else:
            assert "</think><answer>" not in full


def test_eos_ends_a_row_and_is_kept(model, tok, bias):
    eos = tok.eos_token_id
    bias({eos: 9.0})
    gens = HFEngine(model, tok).generate(
        _prompts(tok), SamplingParams(temperature=1.0, max_new_tokens=40, stop_strings=[], seed=0)
    )
    assert all(g.finish_reason == "eos" and g.token_ids[-1] == eos for g in gens)
    assert all(eos not in g.token_ids[:-1] for g in gens)
    assert "<|im_end|>" not in gens[0].text  # text skips special tokens


def test_length_and_zero_new_tokens(model, tok):
    engine = HFEngine(model, tok)
    gens = engine.generate(_prompts(tok), SamplingParams(max_new_tokens=5, stop_strings=[], seed=0))
    assert all(len(g.token_ids) <= 5 for g in gens)
    assert all(g.finish_reason == "length" for g in gens if len(g.token_ids) == 5)
    empty = engine.generate(_prompts(tok), SamplingParams(max_new_tokens=0))
    assert all(g.token_ids == [] and g.finish_reason == "length" for g in empty)
    assert engine.generate([], SamplingParams()) == []


def test_seeded_sampling_is_reproducible(model, tok):
    engine = HFEngine(model, tok)
    params = SamplingParams(temperature=1.0, max_new_tokens=12, stop_strings=[], seed=7)
    a = engine.generate(_prompts(tok), params)
    b = engine.generate(_prompts(tok), params)
    c = engine.generate(_prompts(tok), SamplingParams(**{**params.__dict__, "seed": 8}))
    assert [g.token_ids for g in a] == [g.token_ids for g in b]
    assert [g.logprobs for g in a] == [g.logprobs for g in b]
    assert [g.token_ids for g in a] != [g.token_ids for g in c]


def test_temperature_zero_is_greedy_and_batch_invariant(model, tok):
    engine = HFEngine(model, tok)
    prompts = _prompts(tok)
    params = SamplingParams(temperature=0.0, max_new_tokens=10, stop_strings=[])
    batched = engine.generate(prompts, params)
    for prompt, gen in zip(prompts, batched):
        ids = torch.tensor([prompt + gen.token_ids])
        with torch.no_grad():
            logits = model(ids).logits[0, len(prompt) - 1 : -1]
        assert logits.argmax(-1).tolist() == gen.token_ids
        # logprob reported with T = 1 for greedy decoding
        assert torch.allclose(
            torch.tensor(gen.logprobs), _recomputed(model, prompt, gen, 1.0), atol=1e-4
        )
        alone = engine.generate([prompt], params)[0]
        assert alone.token_ids == gen.token_ids


def test_matches_transformers_greedy_generate(model, tok):
    prompt = tok.encode("<think>I should move")
    ours = HFEngine(model, tok).generate(
        [prompt], SamplingParams(temperature=0.0, max_new_tokens=8, stop_strings=[])
    )[0]
    with torch.no_grad():
        ref = model.generate(
            torch.tensor([prompt]),
            do_sample=False,
            max_new_tokens=8,
            eos_token_id=[],
            pad_token_id=0,
        )[0, len(prompt) :].tolist()
    n = len(ours.token_ids)
    assert ours.token_ids == ref[:n]


def test_sample_next_token_top_k_top_p():
    logits = torch.tensor([[3.0, 2.0, 1.0, 0.0, -1.0]]).repeat(2000, 1)
    gen = torch.Generator().manual_seed(0)
    ids, logp = sample_next_token(logits, temperature=1.0, top_p=1.0, top_k=2, generator=gen)
    assert set(ids.tolist()) == {0, 1}
    full = torch.log_softmax(logits[0], -1)
    assert torch.allclose(logp, full[ids])  # log-prob BEFORE truncation
    ids, _ = sample_next_token(logits, temperature=1.0, top_p=0.5, top_k=0, generator=gen)
    assert set(ids.tolist()) == {0}  # p(top) = 0.64 >= 0.5
    ids, logp = sample_next_token(logits, temperature=0.5, top_p=1.0, top_k=0, generator=gen)
    assert torch.allclose(logp, torch.log_softmax(logits[0] / 0.5, -1)[ids])


def test_training_mode_restored_and_stats(model, tok):
    engine = HFEngine(model, tok)
    model.train()
    try:
        gens = engine.generate(_prompts(tok)[:2], SamplingParams(max_new_tokens=4, seed=0))
        assert model.training
    finally:
        model.eval()
    assert engine.stats.generated_tokens == sum(len(g.token_ids) for g in gens)
    assert engine.stats.calls == 1 and engine.stats.tokens_per_s > 0
    engine.reset_stats()
    assert engine.stats.generated_tokens == 0 and engine.stats.seconds == 0


def test_bad_inputs_raise_clear_errors(model, tok):
    engine = HFEngine(model, tok)
    with pytest.raises(ValueError, match="prompt 1 is empty"):
        engine.generate([[1, 2], []], SamplingParams())
    with pytest.raises(ValueError, match="outside"):
        engine.generate([[10**6]], SamplingParams())
    with pytest.raises(ValueError, match="temperature"):
        engine.generate([[1]], SamplingParams(temperature=-1))
    with pytest.raises(ValueError, match="top_p"):
        engine.generate([[1]], SamplingParams(top_p=0))
    with pytest.raises(ValueError, match="context"):
        engine.generate([[5] * model.config.max_position_embeddings], SamplingParams())


def test_peft_wrapped_model_shares_weights(model, tok):
    peft = pytest.importorskip("peft")
    import copy

    base = copy.deepcopy(model)
    wrapped = peft.get_peft_model(
        base, peft.LoraConfig(r=2, lora_alpha=4, target_modules=["q_proj", "v_proj"])
    )
    prompts = _prompts(tok)[:2]
    params = SamplingParams(temperature=1.0, max_new_tokens=6, stop_strings=[], seed=0)
    gens = HFEngine(wrapped, tok).generate(prompts, params)
    for prompt, gen in zip(prompts, gens):
        expected = _recomputed(wrapped, prompt, gen, 1.0)
        assert torch.allclose(torch.tensor(gen.logprobs), expected, atol=1e-4)


def _next_turn(tok, prompts, gens):
    """Token-exact next prompts: history + sampled ids + a new user turn."""
    obs = [
        tok.encode(f"<|im_end|>\n<|im_start|>user\nTurn 2: reward {i}<|im_end|>\n")
        + tok.encode("<|im_start|>assistant\n")
        for i in range(len(prompts))
    ]
    return [p + g.token_ids + o for p, g, o in zip(prompts, gens, obs)]


def test_prefix_reuse_matches_full_recompute(model, tok):
    cached, plain = HFEngine(model, tok), HFEngine(model, tok, prefix_cache=False)
    params = SamplingParams(temperature=1.0, max_new_tokens=8, stop_strings=[], seed=4)
    prompts = _prompts(tok)
    first = cached.generate(prompts, params)
    assert [g.token_ids for g in first] == [g.token_ids for g in plain.generate(prompts, params)]
    second_prompts = _next_turn(tok, prompts, first) + [tok.encode("a new episode")]
    second = cached.generate(second_prompts, params)
    assert cached.stats.reused_prompt_tokens > 0 and plain.stats.reused_prompt_tokens == 0
    reference = plain.generate(second_prompts, params)
    assert [g.token_ids for g in second] == [g.token_ids for g in reference]
    for prompt, gen in zip(second_prompts, second):
        expected = _recomputed(model, prompt, gen, 1.0)
        assert torch.allclose(torch.tensor(gen.logprobs), expected, atol=1e-4)


def test_prefix_store_dropped_when_weights_change(model, tok):
    import copy

    local = copy.deepcopy(model)
    engine = HFEngine(local, tok)
    params = SamplingParams(temperature=1.0, max_new_tokens=6, stop_strings=[], seed=5)
    prompts = _prompts(tok)
    first = engine.generate(prompts, params)
    with torch.no_grad():  # an in-place update, as an optimizer step does
        local.model.norm.weight.mul_(1.5)
    second_prompts = _next_turn(tok, prompts, first)
    second = engine.generate(second_prompts, params)
    assert engine.stats.reused_prompt_tokens == 0
    for prompt, gen in zip(second_prompts, second):
        expected = _recomputed(local, prompt, gen, 1.0)
        assert torch.allclose(torch.tensor(gen.logprobs), expected, atol=1e-4)
    engine.clear_prefix_cache()
    engine.generate(_next_turn(tok, second_prompts, second), params)
    assert engine.stats.reused_prompt_tokens == 0


def test_prefix_store_respects_disabled_peft_adapter(model, tok):
    peft = pytest.importorskip("peft")
    import copy

    wrapped = peft.get_peft_model(
        copy.deepcopy(model), peft.LoraConfig(r=2, target_modules=["q_proj", "v_proj"])
    )
    with torch.no_grad():  # make the adapter matter
        for name, p in wrapped.named_parameters():
            if "lora_B" in name:
                p.normal_(std=0.5)
    engine = HFEngine(wrapped, tok)
    params = SamplingParams(temperature=1.0, max_new_tokens=5, stop_strings=[], seed=6)
    prompts = _prompts(tok)[:2]
    first = engine.generate(prompts, params)
    with wrapped.disable_adapter():
        engine.generate(_next_turn(tok, prompts, first), params)
    assert engine.stats.reused_prompt_tokens == 0


def test_common_prefix_length():
    from ragen.engines.hf import common_prefix_length

    assert common_prefix_length([[1, 2, 3, 4], [1, 2, 3, 5], [1, 2, 9]]) == 2
    assert common_prefix_length([[1, 2, 3], [1, 2, 3]]) == 2  # the last id is computed
    assert common_prefix_length([[1, 2, 3], [1, 2, 3, 4, 5]]) == 2
    assert common_prefix_length([[7, 1], [8, 1]]) == 0
    assert common_prefix_length([[5], [5]]) == 0


def test_shared_prefix_is_computed_once_and_changes_nothing(model, tok):
    """Prompts that start with the same system prompt: the shared prefix is computed for
    one row and copied into every row; ids and log-probs are those computed per row."""
    from ragen.engines.hf import MIN_SHARED_PREFIX

    system = tok.encode("<|im_start|>system\nYou push boxes onto targets. " * 3)
    assert len(system) >= MIN_SHARED_PREFIX
    tails = ["Turn 1: #P_X#", "Turn 1: #_PX_O#", "go", "Turn 1, 5 actions left: ##"]
    prompts = [system + tok.encode(t) for t in tails]
    shared, alone = HFEngine(model, tok), HFEngine(model, tok, share_prefix=False)
    params = SamplingParams(temperature=1.0, max_new_tokens=8, stop_strings=[], seed=8)
    ours, theirs = shared.generate(prompts, params), alone.generate(prompts, params)
    assert [g.token_ids for g in ours] == [g.token_ids for g in theirs]
    block = max(len(p) for p in prompts) - len(system)  # the columns after the prefix
    assert shared.stats.reused_prompt_tokens == sum(len(p) - block for p in prompts) > 0
    assert alone.stats.reused_prompt_tokens == 0
    for prompt, gen in zip(prompts, ours):
        expected = _recomputed(model, prompt, gen, 1.0)
        assert torch.allclose(torch.tensor(gen.logprobs), expected, atol=1e-4)
    # the next turn extends the last call's sequences: their longer prefixes win
    again = shared.generate(_next_turn(tok, prompts, ours), params)
    reference = alone.generate(_next_turn(tok, prompts, ours), params)
    assert [g.token_ids for g in again] == [g.token_ids for g in reference]
    # a batch whose prompts share too little computes everything
    fresh = HFEngine(model, tok)
    fresh.generate([tok.encode("go left"), tok.encode("stay")], params)
    assert fresh.stats.reused_prompt_tokens == 0
