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
