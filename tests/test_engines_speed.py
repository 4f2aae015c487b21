"""The engine's throughput rebuild (docs/SPEED.md) samples what it sampled before.

Identical prompts of a call are prefilled once; ``keep_kv=False`` stores no row's K/V;
the decode loop keeps its ids in tensors. Each is checked against the path without it,
with the same seed: same ids, same finish reasons, log-probs within 1e-5.
"""

from __future__ import annotations

import pytest
import torch

from ragen.engines.base import SamplingParams
from ragen.engines.compiled import StaticHFEngine
from ragen.engines.hf import HFEngine, distinct_prompts
from ragen.models.tiny import build_model, build_tokenizer


@pytest.fixture(scope="module")
def tok():
    return build_tokenizer("chatml")


@pytest.fixture(scope="module")
def model(tok):
    return build_model("nano", tok, seed=0)


def _prompts(tok):
    """A system prompt all rows share, then one of three states; each state asked by
    three rows (a group's episodes at their first turn), one state alone."""
    system = "You are a helpful agent. Reply <think>...</think><answer>...</answer>. "
    states = ["Turn 1:\n#P_X#", "Turn 1:\n#_PX#\n#__#", "Turn 1:\n#X_P#", "Turn 2: alone"]
    texts = [states[i] for i in (0, 1, 0, 2, 1, 0, 2, 1, 2, 3)]
    return [tok.encode(system + t) for t in texts]


def _assert_same(a, b):
    assert [g.token_ids for g in a] == [g.token_ids for g in b]
    assert [g.finish_reason for g in a] == [g.finish_reason for g in b]
    for x, y in zip(a, b):
        torch.testing.assert_close(
            torch.tensor(x.logprobs), torch.tensor(y.logprobs), atol=1e-5, rtol=0
        )


def test_distinct_prompts():
    distinct, inverse = distinct_prompts([[1, 2], [3], [1, 2], [3], [4]])
    assert distinct == [[1, 2], [3], [4]] and inverse == [0, 1, 0, 1, 2]


@pytest.mark.parametrize("engine_class", [HFEngine, StaticHFEngine], ids=["eager", "static"])
def test_identical_prompts_are_prefilled_once_with_the_same_samples(model, tok, engine_class):
    prompts = _prompts(tok)
    vec = torch.zeros(model.config.vocab_size)
    vec[tok.convert_tokens_to_ids("</answer>")] = 4.0  # rows stop at different steps
    handle = model.lm_head.register_forward_hook(lambda mod, inp, out: out + vec)
    try:
        params = SamplingParams(temperature=1.0, max_new_tokens=20, seed=5)
        once = engine_class(model, tok)
        every = engine_class(model, tok)
        every.dedupe_prompts = False
        a, b = once.generate(prompts, params), every.generate(prompts, params)
    finally:
        handle.remove()
    assert {g.finish_reason for g in a} >= {"stop"}
    _assert_same(a, b)
    assert once.stats.duplicate_prompts == 6 and every.stats.duplicate_prompts == 0


def test_keep_kv_false_keeps_no_rows(model, tok):
    prompts = _prompts(tok)
    engine = StaticHFEngine(model, tok)
    kept = engine.generate(prompts, SamplingParams(max_new_tokens=6, seed=1))
    assert len(engine._store) == len(prompts)  # each row's K/V, for a prompt extending it
    engine.clear_prefix_cache()
    params = SamplingParams(max_new_tokens=6, seed=1, keep_kv=False)
    fresh = engine.generate(prompts, params)
    assert len(engine._store) == 0
    _assert_same(kept, fresh)


def test_decode_loop_matches_a_row_by_row_loop(model, tok):
    """The tensor bookkeeping against the list-per-row loop it replaced, re-implemented
    here from the same decode step: same ids, reasons and log-probs for a call whose
    rows stop by stop string, by EOS and by length."""
    prompts = _prompts(tok)[:6]
    eos = tok.convert_tokens_to_ids("<|im_end|>")
    vec = torch.zeros(model.config.vocab_size)
    vec[[tok.convert_tokens_to_ids("</answer>"), eos]] = 3.5
    handle = model.lm_head.register_forward_hook(lambda mod, inp, out: out + vec)
    try:
        params = SamplingParams(temperature=1.0, max_new_tokens=16, seed=0)
        engine = HFEngine(model, tok, prefix_cache=False)
        engine.dedupe_prompts = False
        got = engine.generate(prompts, params)
        expected = _row_by_row(engine, prompts, params)
    finally:
        handle.remove()
    assert {g.finish_reason for g in got} == {"stop", "eos", "length"}
    _assert_same(got, expected)


def _row_by_row(engine, prompts, params):
    """The pre-rebuild loop: Python lists per row, one ``tolist`` per step, a compaction
    once an eighth of the batch finished (the same rule, so the same draws)."""
    from ragen.engines.hf import left_padded_batch, make_kv_cache

    ids_in, attention, positions, next_position = left_padded_batch(
        prompts, engine.pad_token_id, "cpu"
    )
    width, batch = ids_in.shape[1], len(prompts)
    generator = torch.Generator().manual_seed(params.seed)
    with torch.no_grad():
        cache = make_kv_cache(engine.model, width + params.max_new_tokens)
        logits = engine._prefill(cache, attention, ids_in, positions)
        tokens, logprobs, reasons = [[] for _ in prompts], [[] for _ in prompts], ["length"] * batch
        rows, alive = list(range(batch)), [True] * batch
        eos = set(engine.eos_token_ids)
        for step in range(params.max_new_tokens):
            ids, logps = engine._sample(logits, params, torch.rand(len(rows), generator=generator))
            for i, row in enumerate(rows):
                if not alive[i]:
                    continue
                tokens[row].append(int(ids[i]))
                logprobs[row].append(float(logps[i]))
                if int(ids[i]) in eos:
                    reasons[row], alive[i] = "eos", False
                elif any(s in tok_text(engine, tokens[row]) for s in params.stop_strings):
                    reasons[row], alive[i] = "stop", False
            keep = [i for i in range(len(rows)) if alive[i]]
            if step == params.max_new_tokens - 1 or not keep:
                break
            if len(rows) - len(keep) >= max(1, len(rows) / 8):
                index = torch.tensor(keep)
                cache.batch_select_indices(index)
                attention, ids, next_position = attention[index], ids[index], next_position[index]
                rows, alive = [rows[i] for i in keep], [True] * len(keep)
            attention, logits = engine._decode_step(cache, attention, ids, next_position)
            next_position = next_position + 1
    return engine._finish(tokens, logprobs, reasons)


def tok_text(engine, ids):
    return engine.tokenizer.decode(ids, skip_special_tokens=False)
