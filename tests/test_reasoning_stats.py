"""Reasoning-collapse statistics: cross-prompt scoring, conditional entropy, MI."""

import math
from types import SimpleNamespace

import pytest
import torch

from ragen.trainer.reasoning_stats import (
    cross_prompt_logprobs,
    first_turn,
    mi_from_logprobs,
    reasoning_span,
)


def test_mi_hand_made_matrix():
    # each reasoning is 9x likelier under its own prompt than under the other one
    L = torch.log(torch.tensor([[0.9, 0.1], [0.1, 0.9]]))
    out = mi_from_logprobs(L, torch.tensor([1.0, 1.0]))
    assert out["reasoning/cond_entropy"] == pytest.approx(-math.log(0.9))
    assert out["reasoning/mutual_info"] == pytest.approx(math.log(0.9 / 0.5))
    assert out["reasoning/mutual_info_max"] == pytest.approx(math.log(2))
    assert out["reasoning/retrieval_acc"] == 1.0
    # per-token conditional entropy: a 3-token reasoning divides its log-prob by 3
    out = mi_from_logprobs(L * 3, torch.tensor([3.0, 3.0]))
    assert out["reasoning/cond_entropy"] == pytest.approx(-math.log(0.9))


def test_mi_is_zero_when_the_prompt_does_not_matter():
    L = torch.tensor([[-2.0, -2.0, -2.0], [-5.0, -5.0, -5.0], [-1.0, -1.0, -1.0]])
    out = mi_from_logprobs(L, torch.tensor([2.0, 5.0, 1.0]))
    assert out["reasoning/mutual_info"] == pytest.approx(0.0, abs=1e-12)
    assert out["reasoning/cond_entropy"] == pytest.approx((1 + 1 + 1) / 3)


class _Bigram(torch.nn.Module):
    """A causal LM whose next-token logits depend on the current token only, or (with
    ``see_first``) also on the first token of the row."""

    def __init__(self, vocab=12, see_first=False):
        super().__init__()
        torch.manual_seed(0)
        self.emb = torch.nn.Embedding(vocab, 16)
        self.first = torch.nn.Embedding(vocab, 16)
        self.out = torch.nn.Linear(16, vocab)
        self.see_first = see_first

    def forward(self, input_ids, attention_mask=None, position_ids=None, use_cache=False):
        h = self.emb(input_ids)
        if self.see_first:
            h = h + 3 * self.first(input_ids[:, :1])
        return SimpleNamespace(logits=self.out(h))


def test_cross_scoring_model_that_ignores_the_prompt_gives_zero_mi():
    # prompts differ but all end with token 1 (like a chat template's "assistant\n")
    prompts = [[5, 1], [7, 3, 1], [9, 1]]
    responses = [[2, 4, 6], [4, 4], [8, 2, 2, 6]]
    spans = [(0, 3), (0, 2), (1, 4)]
    L = cross_prompt_logprobs(_Bigram(), prompts, responses, spans, pad_id=0, max_rows=4)
    assert L.shape == (3, 3)
    assert torch.allclose(L, L[:, :1].expand(3, 3), atol=1e-5)  # rows constant
    lengths = torch.tensor([3.0, 2.0, 3.0])
    assert mi_from_logprobs(L, lengths)["reasoning/mutual_info"] == pytest.approx(0, abs=1e-5)


class _EchoFirst(torch.nn.Module):
    """Predicts the row's first token everywhere: its reasoning is read off the prompt."""

    def forward(self, input_ids, attention_mask=None, position_ids=None, use_cache=False):
        logits = 8.0 * torch.nn.functional.one_hot(input_ids[:, :1], 12).float()
        return SimpleNamespace(logits=logits.expand(*input_ids.shape, 12))


def test_cross_scoring_model_that_reads_the_prompt_gives_mi_near_log_n():
    prompts = [[5, 1], [7, 1], [9, 1]]
    responses = [[5, 5], [7, 7], [9, 9]]  # each reasoning repeats its prompt's first token
    L = cross_prompt_logprobs(_EchoFirst(), prompts, responses, [(0, 2)] * 3, pad_id=0)
    out = mi_from_logprobs(L, torch.tensor([2.0, 2.0, 2.0]))
    assert out["reasoning/mutual_info"] == pytest.approx(math.log(3), abs=1e-3)
    assert out["reasoning/retrieval_acc"] == 1.0


def test_cross_scoring_matches_direct_scoring():
    # L[i, j] is the sum of the span tokens' log-probs of prompt_j + response_i
    model = _Bigram(see_first=True)
    prompts, responses, spans = [[5, 1], [7, 1]], [[2, 4, 6], [3, 3]], [(1, 3), (0, 2)]
    L = cross_prompt_logprobs(model, prompts, responses, spans, pad_id=0)
    ids = torch.tensor([[7, 1, 2, 4, 6]])
    with torch.no_grad():
        logp = torch.log_softmax(model(ids).logits, -1)[0]
    direct = logp[2, 4] + logp[3, 6]  # span (1, 3) of response 0 = tokens 4, 6
    assert float(L[0, 1]) == pytest.approx(float(direct), abs=1e-5)


def test_first_turn_and_reasoning_span(tiny_model_dir):
    from transformers import AutoTokenizer

    assert first_turn([1, 2, 3, 4, 5, 6], [0, 0, 1, 1, 0, 1]) == ([1, 2], [3, 4])
    assert first_turn([1, 2], [0, 0]) is None
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    ids = tok("<think>go left now</think><answer>Left</answer>", add_special_tokens=False)[
        "input_ids"
    ]
    start, end = reasoning_span(ids, tok)
    span = tok.decode(ids[start:end])
    assert "go left now" in span and span.rstrip().endswith("</think>")
    assert "<answer>" not in span and "<think>" not in span
    no_think = tok("<answer>Left</answer>", add_special_tokens=False)["input_ids"]
    assert reasoning_span(no_think, tok) == (0, len(no_think))


# -- RAGEN-2's form: every rollout scored, duplicate prompts merged, per token -------------
def test_duplicate_prompts_are_one_input():
    # four thoughts, two distinct prompts (two samples each); each thought is 9x likelier
    # under its own prompt. Counting the copies as four inputs would claim up to log 4.
    L = torch.log(torch.tensor([[0.9, 0.1], [0.9, 0.1], [0.1, 0.9], [0.1, 0.9]]))
    out = mi_from_logprobs(L, torch.ones(4), own=[0, 0, 1, 1])
    assert out["reasoning/mutual_info"] == pytest.approx(math.log(0.9 / 0.5))
    assert out["reasoning/mutual_info_max"] == pytest.approx(math.log(2))
    assert out["reasoning/prompts"] == 2 and out["reasoning/samples"] == 4
    assert out["reasoning/retrieval_acc"] == 1.0


def test_mixture_weights_follow_the_prompt_counts():
    # a thought that names its prompt exactly: MI = H(X) of the batch's prompt mix,
    # here 3 samples of prompt 0 and 1 of prompt 1
    L = torch.tensor([[0.0, -50.0]] * 3 + [[-50.0, 0.0]])
    out = mi_from_logprobs(L, torch.ones(4), own=[0, 0, 0, 1])
    h = -(0.75 * math.log(0.75) + 0.25 * math.log(0.25))
    assert out["reasoning/mutual_info"] == pytest.approx(h, abs=1e-9)
    assert out["reasoning/mutual_info_max"] == pytest.approx(h)


def test_per_token_form_divides_each_thought_by_its_length():
    # thought 0 (4 tokens) and thought 1 (1 token), each likelier under its own prompt
    L = torch.tensor([[-4.0, -8.0], [-3.0, -1.0]])
    lengths = torch.tensor([4.0, 1.0])
    out = mi_from_logprobs(L, lengths)

    def term(row, own):
        return row[own] - torch.logsumexp(row + math.log(0.5), 0)

    seq = (term(L[0], 0) + term(L[1], 1)) / 2
    tok = (term(L[0] / 4, 0) + term(L[1], 1)) / 2
    assert out["reasoning/mutual_info"] == pytest.approx(float(seq))
    assert out["reasoning/mutual_info_token"] == pytest.approx(float(tok))
    assert out["reasoning/mutual_info_token"] < out["reasoning/mutual_info"]


def test_cross_scoring_is_responses_by_distinct_prompts():
    # 3 responses, 2 prompts: (3, 2), each entry equal to scoring that pair alone
    model = _Bigram(see_first=True)
    prompts, responses = [[5, 1], [7, 1]], [[2, 4, 6], [3, 3], [4, 2]]
    spans = [(1, 3), (0, 2), (0, 1)]
    L = cross_prompt_logprobs(model, prompts, responses, spans, pad_id=0, max_rows=2)
    assert L.shape == (3, 2)
    for i in range(3):
        for k in range(2):
            alone = cross_prompt_logprobs(model, [prompts[k]], [responses[i]], [spans[i]], 0)
            assert float(L[i, k]) == pytest.approx(float(alone[0, 0]), abs=1e-5)


def _sample(prompt, response, group):
    ids = list(prompt) + list(response)
    mask = [0] * len(prompt) + [1] * len(response)
    return SimpleNamespace(input_ids=ids, response_mask=mask, group_id=group)


def test_reasoning_stats_scores_every_sample_and_merges_prompts(tiny_model_dir):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from ragen.trainer.reasoning_stats import distinct_prompts, reasoning_stats

    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)

    def enc(text):
        return tok(text, add_special_tokens=False)["input_ids"]

    # 3 groups x 2 members; the members of a group share their prompt
    prompts = [enc(f"state {w}: where next?") for w in ("one", "two", "three")]
    trajs = [
        _sample(prompts[g], enc(f"<think>go {w}</think><answer>{w}</answer>"), g)
        for g in range(3)
        for w in ("Left", "Up")
    ]
    assert distinct_prompts([t.input_ids[: len(prompts[t.group_id])] for t in trajs])[1] == [
        0, 0, 1, 1, 2, 2,
    ]  # fmt: skip
    out = reasoning_stats(model, tok, trajs, 64, tok.pad_token_id or 0, 1.0, "cpu", seed=0)
    assert out["reasoning/samples"] == 6 and out["reasoning/prompts"] == 3
    assert out["reasoning/mutual_info_max"] == pytest.approx(math.log(3))
    # each term is at most log(1 / w_own), so the estimate never passes H(w) (it can dip
    # below 0 for a model whose thoughts fit other prompts better: a Monte-Carlo estimate)
    assert math.isfinite(out["reasoning/mutual_info"])
    assert out["reasoning/mutual_info"] <= math.log(3) + 1e-9
    # at most num_samples are scored, drawn with the seed (the same draw twice)
    few = reasoning_stats(model, tok, trajs, 4, tok.pad_token_id or 0, 1.0, "cpu", seed=3)
    assert few["reasoning/samples"] == 4
    assert few == reasoning_stats(model, tok, trajs, 4, tok.pad_token_id or 0, 1.0, "cpu", 3)
    # one prompt for all: no MI to report, the conditional entropy stays
    same = [_sample(prompts[0], t.input_ids[len(prompts[t.group_id]) :], 0) for t in trajs]
    one = reasoning_stats(model, tok, same, 64, tok.pad_token_id or 0, 1.0, "cpu", seed=0)
    assert "reasoning/mutual_info" not in one and one["reasoning/prompts"] == 1
    assert one["reasoning/cond_entropy"] > 0


def test_cross_scoring_calls_respect_row_and_token_caps():
    from ragen.trainer.reasoning_stats import _calls

    # rows of padded size (rows x longest) within the token cap, at most max_rows, in order
    lengths = [3, 3, 5, 2, 9, 1]
    calls = _calls(list(range(6)), lengths, max_rows=3, max_tokens=12)
    assert [i for c in calls for i in c] == list(range(6))
    for c in calls:
        assert len(c) <= 3
        assert len(c) == 1 or len(c) * max(lengths[i] for i in c) <= 12
    assert _calls([0], [50], max_rows=4, max_tokens=10) == [[0]]  # one row always goes
    # the matrix does not depend on how the rows are cut into calls
    model = _Bigram(see_first=True)
    prompts, responses = [[5, 1], [7, 1], [6, 2, 1]], [[2, 4, 6], [3, 3], [4, 2]]
    spans = [(1, 3), (0, 2), (0, 1)]
    whole = cross_prompt_logprobs(model, prompts, responses, spans, pad_id=0)
    cut = cross_prompt_logprobs(model, prompts, responses, spans, pad_id=0, max_tokens=6)
    assert torch.allclose(whole, cut, atol=1e-6)
