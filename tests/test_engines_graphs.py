"""The fixed-shape decode step that CUDA graphs replay (ragen.engines.graphs), run eagerly
on the CPU: it samples what the usual static step samples. The capture itself needs a
CUDA device (``test_graphs_capture_on_cuda``, skipped without one)."""

from __future__ import annotations

import logging

import pytest
import torch

from ragen.engines.base import SamplingParams
from ragen.engines.compiled import StaticHFEngine, make_hf_engine
from ragen.engines.graphs import GraphedDecode
from ragen.models.tiny import build_model, build_tokenizer


@pytest.fixture(scope="module")
def tok():
    return build_tokenizer("chatml")


@pytest.fixture(scope="module")
def model(tok):
    return build_model("nano", tok, seed=0)


def _prompts(tok):
    texts = ["Turn 1:\nState:\n#P_X#", "go", "Turn 2: the box is left of you", "go", "a b c"]
    return [tok.encode(t) for t in texts]


def _assert_same(a, b):
    assert [g.token_ids for g in a] == [g.token_ids for g in b]
    assert [g.finish_reason for g in a] == [g.finish_reason for g in b]
    for x, y in zip(a, b):
        torch.testing.assert_close(
            torch.tensor(x.logprobs), torch.tensor(y.logprobs), atol=1e-5, rtol=0
        )


def _eager_graphs(model, tok):
    engine = StaticHFEngine(model, tok)
    engine._graphs = GraphedDecode(engine._direct, capture=False)
    return engine


def test_fixed_shape_step_samples_what_the_static_step_samples(model, tok):
    vec = torch.zeros(model.config.vocab_size)
    vec[tok.convert_tokens_to_ids("</answer>")] = 4.0  # rows stop at different steps
    handle = model.lm_head.register_forward_hook(lambda mod, inp, out: out + vec)
    try:
        params = SamplingParams(temperature=1.0, max_new_tokens=24, seed=3)
        graphed, plain = _eager_graphs(model, tok), StaticHFEngine(model, tok)
        first = graphed.generate(_prompts(tok), params)
        _assert_same(first, plain.generate(_prompts(tok), params))
        assert graphed._graphs_on
        # a second turn extends the first: the rows' K/V were stored from their physical
        # rows (the logical batch had dropped finished rows by then)
        nxt = [p + g.token_ids + tok.encode(" next") for p, g in zip(_prompts(tok), first)]
        again = graphed.generate(nxt, params)
        assert graphed.stats.reused_prompt_tokens > 0
        _assert_same(again, plain.generate(nxt, params))
    finally:
        handle.remove()


def test_graphs_requested_off_cuda_warn_and_decode_as_usual(model, tok, caplog):
    with caplog.at_level(logging.WARNING, logger="ragen.engines.compiled"):
        engine = make_hf_engine(model, tok, "static-graphs")
    assert engine._graphs is None and "CUDA graphs need" in caplog.text
    params = SamplingParams(max_new_tokens=8, seed=1)
    _assert_same(
        engine.generate(_prompts(tok), params),
        StaticHFEngine(model, tok).generate(_prompts(tok), params),
    )


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need a CUDA device")
def test_graphs_capture_on_cuda(model, tok):
    import copy

    gpu = copy.deepcopy(model).to("cuda")
    params = SamplingParams(temperature=1.0, max_new_tokens=16, seed=3)
    graphed = make_hf_engine(gpu, tok, "static-graphs")
    assert graphed._graphs is not None
    _assert_same(
        graphed.generate(_prompts(tok), params),
        StaticHFEngine(gpu, tok).generate(_prompts(tok), params),
    )
    assert graphed._graphs.graph is not None
