"""StaticHFEngine (static / compiled decode step) samples exactly what HFEngine samples."""

from __future__ import annotations

import logging

import pytest
import torch

from ragen.engines.base import SamplingParams
from ragen.engines.compiled import StaticHFEngine, make_hf_engine
from ragen.engines.gqa_attention import gqa_decode_attention
from ragen.engines.hf import HFEngine, inverse_cdf_sample
from ragen.models.logprobs import token_logprobs
from ragen.models.tiny import build_model, build_tokenizer


@pytest.fixture(scope="module")
def tok():
    return build_tokenizer("chatml")


@pytest.fixture(scope="module")
def model(tok):
    return build_model("nano", tok, seed=0)


@pytest.fixture
def answer_bias(model, tok):
    """Rows close ``</answer>`` at different steps (a logit bias on the lm_head output)."""
    vec = torch.zeros(model.config.vocab_size)
    vec[tok.convert_tokens_to_ids("</answer>")] = 4.0
    handle = model.lm_head.register_forward_hook(lambda mod, inp, out: out + vec)
    yield
    handle.remove()


def _prompts(tok):
    texts = [
        "Turn 1:\nState:\n#P_X#",
        "You have 5 actions left.",
        "go",
        "Using the numbers [3, 5] make 8",
        "Turn 2: the box is left of you",
    ]
    return [tok.encode(t) for t in texts]


def _assert_same(a, b):
    assert [g.token_ids for g in a] == [g.token_ids for g in b]
    assert [g.finish_reason for g in a] == [g.finish_reason for g in b]
    assert [g.text for g in a] == [g.text for g in b]
    for x, y in zip(a, b):
        assert torch.allclose(torch.tensor(x.logprobs), torch.tensor(y.logprobs), atol=1e-5)


@pytest.mark.parametrize(
    "params",
    [
        SamplingParams(temperature=0.8, top_p=0.95, top_k=200, max_new_tokens=24, seed=1),
        SamplingParams(temperature=1.0, max_new_tokens=20, stop_strings=[], seed=2),
        SamplingParams(temperature=0.0, max_new_tokens=12, seed=0),
    ],
    ids=["stop-topk-topp", "no-stop", "greedy"],
)
def test_static_matches_eager(model, tok, answer_bias, params):
    prompts = _prompts(tok)
    eager = HFEngine(model, tok).generate(prompts, params)
    static = StaticHFEngine(model, tok).generate(prompts, params)
    _assert_same(eager, static)
    if params.stop_strings and params.temperature > 0:
        reasons = {g.finish_reason for g in static}
        assert "stop" in reasons and len({len(g.token_ids) for g in static}) > 1
    for prompt, gen in zip(prompts, static):  # == the trainer's unpadded recompute
        ids = torch.tensor([prompt + gen.token_ids])
        with torch.no_grad():
            expected = token_logprobs(model, ids, temperature=params.temperature or 1.0)
        assert torch.allclose(torch.tensor(gen.logprobs), expected[0, len(prompt) :], atol=1e-4)


def test_static_prefix_reuse_across_turns_matches_eager(model, tok):
    params = SamplingParams(temperature=1.0, max_new_tokens=8, stop_strings=[], seed=4)
    eager, static = HFEngine(model, tok), StaticHFEngine(model, tok)
    prompts = _prompts(tok)
    for turn in range(3):
        a, b = eager.generate(prompts, params), static.generate(prompts, params)
        _assert_same(a, b)
        obs = tok.encode(f"\nTurn {turn + 2}: state")
        prompts = [p + g.token_ids + obs for p, g in zip(prompts, b)]
    assert static.stats.reused_prompt_tokens == eager.stats.reused_prompt_tokens > 0
    assert static.stats.decode_steps > 0 and 0 < static.stats.prefill_seconds < static.stats.seconds


def test_gqa_decode_attention_equals_sdpa():
    """One query per row against strided views of a bigger K/V buffer, with padding."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    gen = torch.Generator().manual_seed(0)
    b, heads, kv_heads, length, dim = 3, 4, 2, 7, 8
    query = torch.randn(b, heads, 1, dim, generator=gen)
    key_buf, value_buf = torch.randn(2, b, kv_heads, 10, dim, generator=gen)
    key, value = key_buf[:, :, :length], value_buf[:, :, :length]
    mask = torch.zeros(b, 1, 1, length)
    mask[1, ..., :3] = float("-inf")  # row 1 is left-padded

    class Module(torch.nn.Module):
        num_key_value_groups = heads // kv_heads
        is_causal = True

    ours, _ = gqa_decode_attention(Module(), query, key, value, mask, scaling=0.3)
    ref, _ = sdpa_attention_forward(Module(), query, key, value, mask, scaling=0.3)
    assert ours.shape == ref.shape == (b, 1, heads, dim)
    assert torch.allclose(ours, ref, atol=1e-5)


def test_inverse_cdf_sample_follows_the_distribution():
    logp = torch.log(torch.tensor([[0.5, 0.0, 0.3, 0.2]])).repeat(20000, 1)
    ids = inverse_cdf_sample(logp, torch.rand(20000, generator=torch.Generator().manual_seed(0)))
    freq = torch.bincount(ids, minlength=4).float() / len(ids)
    assert freq[1] == 0  # a zero-probability (-inf) token is never drawn
    assert torch.allclose(freq, torch.tensor([0.5, 0.0, 0.3, 0.2]), atol=0.015)
    edge = inverse_cdf_sample(logp[:2], torch.tensor([0.0, 1.0 - 1e-7]))
    assert edge.tolist() == [0, 3]


def test_make_hf_engine_choices(model, tok):
    assert type(make_hf_engine(model, tok, "eager")) is HFEngine
    assert not make_hf_engine(model, tok, "static").compile
    assert make_hf_engine(model, tok, "compiled").compile
    with pytest.raises(ValueError, match="eager, static, compiled"):
        make_hf_engine(model, tok, "fast")


def test_compile_failure_falls_back_once(model, tok, monkeypatch, caplog):
    def broken(*args, **kwargs):
        raise RuntimeError("no C++ compiler found")

    monkeypatch.setattr(torch, "compile", broken)
    engine = StaticHFEngine(model, tok, compile=True)
    params = SamplingParams(temperature=1.0, max_new_tokens=6, stop_strings=[], seed=3)
    with caplog.at_level(logging.WARNING, logger="ragen.engines.compiled"):
        first = engine.generate(_prompts(tok), params)
        engine.generate(_prompts(tok), params)
    warnings = [r for r in caplog.records if "decoding uncompiled" in r.getMessage()]
    assert len(warnings) == 1 and "no C++ compiler" in warnings[0].getMessage()
    _assert_same(first, HFEngine(model, tok).generate(_prompts(tok), params))


@pytest.mark.slow
def test_compiled_matches_eager(tok, monkeypatch):
    """torch.compile of the decode step: same ids, same log-probs.

    The aot_eager backend: dynamo's capture of the step (what could break equality)
    without inductor's C++ build, which takes ~30 s even for this one-layer model on
    the 2-core test machine; ``bench/bench_generate.py --engines eager,compiled`` runs
    inductor and checks the same equality."""
    from ragen.models import tiny

    layer = dict(
        hidden_size=64,
        num_hidden_layers=1,
        num_attention_heads=4,
        num_key_value_heads=2,
        intermediate_size=128,
    )
    monkeypatch.setitem(tiny.PRESETS, "one-layer", layer)
    model = tiny.build_model("one-layer", tok, seed=0)
    engine = StaticHFEngine(model, tok, compile=True, compile_options={"backend": "aot_eager"})
    params = SamplingParams(temperature=0.8, top_p=0.95, max_new_tokens=12, seed=1)
    compiled = engine.generate(_prompts(tok), params)
    assert not engine._compile_failed
    _assert_same(HFEngine(model, tok).generate(_prompts(tok), params), compiled)
    assert engine.compile_seconds > 0


def test_stop_prefilter_is_exact(model, tok):
    """Skipping the tail decode for rows whose new token cannot end a stop string
    changes nothing: same stops, same ids (stop strings made of several tokens, ending
    in the middle of a token's text)."""
    think_end, answer_open = tok.convert_tokens_to_ids(["</think>", "<answer>"])
    vec = torch.zeros(model.config.vocab_size)
    vec[[think_end, answer_open]] = 6.0
    handle = model.lm_head.register_forward_hook(lambda mod, inp, out: out + vec)
    try:
        stops = ["</think><answer>", "er>", "5 a"]
        params = SamplingParams(temperature=1.0, max_new_tokens=30, stop_strings=stops, seed=3)
        plain = HFEngine(model, tok)
        plain.prefilter_stops = False
        reference = plain.generate(_prompts(tok), params)
        filtered = StaticHFEngine(model, tok).generate(_prompts(tok), params)
    finally:
        handle.remove()
    assert any(g.finish_reason == "stop" for g in reference)
    _assert_same(reference, filtered)
    for unfiltered in (["é"], ["done "]):  # non-ASCII or whitespace last character
        may_stop = HFEngine(model, tok)._may_complete_stop(unfiltered)
        assert may_stop(0) and may_stop(answer_open)


# -- the direct decode step and the C decode-attention kernel ------------------------------


def _kernel():
    from ragen.engines.cpu_attention import decode_attention_kernel

    kernel = decode_attention_kernel()
    if kernel is None:
        pytest.skip("no C compiler here: the kernel falls back to batched matmuls")
    return kernel


@pytest.mark.parametrize(
    "heads,kv_heads,dim", [(4, 2, 32), (6, 2, 64), (3, 3, 24), (8, 1, 16)], ids=str
)
def test_cpu_decode_attention_equals_gqa(heads, kv_heads, dim, monkeypatch):
    """The C loops against the batched matmuls: left padding (-inf), a live length
    shorter than the buffer, grouped queries, a head size without a specialization,
    and the rows split over two threads."""
    kernel = _kernel()
    gen = torch.Generator().manual_seed(0)
    b, cap, length = 17, 40, 29
    q = torch.randn(b, heads, dim, generator=gen)
    keys, values = torch.randn(2, b, kv_heads, cap, dim, generator=gen)
    mask = torch.zeros(b, cap)
    mask[3, :5] = mask[10, :28] = float("-inf")  # left-padded rows

    class Module(torch.nn.Module):
        num_key_value_groups = heads // kv_heads

    ref, _ = gqa_decode_attention(
        Module(),
        q[:, :, None],
        keys[:, :, :length],
        values[:, :, :length],
        mask[:, None, None, :length],
        scaling=0.2,
    )
    assert kernel.supports(q, keys, values, mask)
    for threads in (1, 2):
        monkeypatch.setattr(torch, "get_num_threads", lambda t=threads: t)
        ours = kernel(q, keys, values, mask, length, 0.2)
        assert ours.shape == (b, heads * dim)
        assert torch.allclose(ours, ref.reshape(b, heads * dim), atol=1e-5)
    # bf16 buffers: the loops widen each element exactly, so they equal fp32 math on the
    # rounded values
    keys16, values16 = keys.to(torch.bfloat16), values.to(torch.bfloat16)
    ref16, _ = gqa_decode_attention(
        Module(),
        q[:, :, None],
        keys16.float()[:, :, :length],
        values16.float()[:, :, :length],
        mask[:, None, None, :length],
        scaling=0.2,
    )
    assert kernel.supports(q, keys16, values16, mask)
    ours16 = kernel(q, keys16, values16, mask, length, 0.2)
    assert torch.allclose(ours16, ref16.reshape(b, heads * dim), atol=1e-5)


def test_cpu_decode_attention_build_failure_says_so_once(tmp_path, monkeypatch, caplog):
    from ragen.engines import cpu_attention

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setenv("CC", str(tmp_path / "no-such-compiler"))
    cpu_attention.decode_attention_kernel.cache_clear()
    try:
        with caplog.at_level(logging.WARNING, logger="ragen.engines.cpu_attention"):
            assert cpu_attention.decode_attention_kernel() is None
            assert cpu_attention.decode_attention_kernel() is None
    finally:
        cpu_attention.decode_attention_kernel.cache_clear()
    warnings = [r for r in caplog.records if "batched matmuls" in r.getMessage()]
    assert len(warnings) == 1 and "no-such-compiler" in warnings[0].getMessage()


def test_static_engine_uses_the_direct_step(model, tok):
    engine = StaticHFEngine(model, tok)
    assert engine._direct is not None and engine._direct.usable()
    assert StaticHFEngine(model, tok, direct=False)._direct is None
    assert StaticHFEngine(model, tok, compile=True)._direct is None


def test_direct_prefill_matches_transformers_prefill(model, tok, monkeypatch):
    """The direct step's prefill (one additive mask per call, grouped-query SDPA) gives
    the ids and log-probs of transformers' prefill, over turns that reuse prefixes and
    rows whose block starts in left padding (a padding query must not turn into NaN)."""
    from ragen.engines.direct import DirectDecodeStep

    calls = []
    real = DirectDecodeStep.prefill

    def spy(self, layers, attention, ids, positions):
        calls.append((layers[0].length, tuple(ids.shape)))
        logits = real(self, layers, attention, ids, positions)
        for kv in layers:  # padding columns hold finite K/V: later steps weight them 0
            assert torch.isfinite(kv.keys).all() and torch.isfinite(kv.values).all()
        return logits

    monkeypatch.setattr(DirectDecodeStep, "prefill", spy)
    params = SamplingParams(temperature=1.0, max_new_tokens=8, stop_strings=[], seed=9)
    ours, theirs = StaticHFEngine(model, tok), StaticHFEngine(model, tok, direct_prefill=False)
    prompts = _prompts(tok)
    for turn in range(3):
        a, b = theirs.generate(prompts, params), ours.generate(prompts, params)
        _assert_same(a, b)
        obs = tok.encode(f"\nTurn {turn + 2}: the state" + " x" * turn)
        prompts = [p + g.token_ids + obs for p, g in zip(prompts, b)]
    assert len(calls) == 3 and calls[0][0] == 0 and calls[1][0] > 0  # turn 2 reused K/V
    assert ours.stats.reused_prompt_tokens == theirs.stats.reused_prompt_tokens > 0


@pytest.mark.parametrize("variant", ["modules", "no-kernel", "layer-hook"])
def test_direct_step_variants_match_eager(model, tok, variant):
    """The direct step with and without the C kernel, and the fallback to transformers'
    forward while a hook sits on a decoder layer: the same ids and log-probs."""
    params = SamplingParams(temperature=0.9, top_k=100, max_new_tokens=16, seed=5)
    kwargs = {"direct": False} if variant == "modules" else {}
    if variant == "no-kernel":
        kwargs["attention_kernel"] = False
    engine = StaticHFEngine(model, tok, **kwargs)
    handle = None
    if variant == "layer-hook":
        handle = model.model.layers[1].register_forward_hook(lambda mod, inp, out: None)
        assert not engine._direct.usable()
    try:
        ours = engine.generate(_prompts(tok), params)
    finally:
        if handle is not None:
            handle.remove()
    _assert_same(HFEngine(model, tok).generate(_prompts(tok), params), ours)


def test_direct_step_runs_lora_adapters(tok):
    """PEFT LoRA layers are called as modules: the adapted model samples as eager does."""
    from peft import LoraConfig, get_peft_model

    base = build_model("nano", tok, seed=1)
    config = LoraConfig(
        r=4, target_modules=["q_proj", "v_proj", "up_proj"], init_lora_weights=False
    )
    peft_model = get_peft_model(base, config)
    engine = StaticHFEngine(peft_model, tok)
    assert engine._direct is not None
    params = SamplingParams(temperature=1.0, max_new_tokens=12, stop_strings=[], seed=6)
    ours = engine.generate(_prompts(tok), params)
    _assert_same(HFEngine(peft_model, tok).generate(_prompts(tok), params), ours)
    with peft_model.disable_adapter():
        plain = engine.generate(_prompts(tok), params)
        _assert_same(HFEngine(peft_model, tok).generate(_prompts(tok), params), plain)
    assert [g.token_ids for g in plain] != [g.token_ids for g in ours]


def test_bf16_opt_in_is_close_not_exact(model, tok):
    """``model.engine=static-bf16``: the direct step's matmuls in bf16, K/V stored in
    bf16. Its log-probs are those of slightly different logits: close to the trainer's
    fp32 recompute of the same ids, not equal."""
    engine = make_hf_engine(model, tok, "static-bf16")
    assert engine.bf16_matmuls and not StaticHFEngine(model, tok).bf16_matmuls
    assert engine.kv_dtype == torch.bfloat16 and StaticHFEngine(model, tok).kv_dtype is None
    params = SamplingParams(temperature=1.0, max_new_tokens=16, stop_strings=[], seed=7)
    gens = engine.generate(_prompts(tok), params)
    worst = 0.0
    for prompt, gen in zip(_prompts(tok), gens):
        ids = torch.tensor([prompt + gen.token_ids])
        with torch.no_grad():
            expected = token_logprobs(model, ids)[0, len(prompt) :]
        worst = max(worst, (torch.tensor(gen.logprobs) - expected).abs().max().item())
    assert 1e-5 < worst < 5e-2
    # prefix reuse across turns with bf16 K/V: the stored K/V are bf16 and reused
    obs = tok.encode("\nTurn 2: state")
    prompts = [p + g.token_ids + obs for p, g in zip(_prompts(tok), gens)]
    again = engine.generate(prompts, params)
    assert engine.stats.reused_prompt_tokens > 0 and all(g.token_ids for g in again)
