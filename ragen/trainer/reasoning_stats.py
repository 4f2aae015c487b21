"""Reasoning-collapse statistics: how much the reasoning still depends on the prompt.

A policy caught in the echo trap writes the same thought whatever it reads. Two numbers
measure that on a step's own rollouts, with one extra batched forward pass (RAGEN-2's
reasoning-collapse metrics, estimated by cross-prompt scoring):

Take n (prompt, reasoning) pairs (p_i, r_i) of the step, one per group so the prompts
differ, and score every reasoning under every prompt::

    L[i, j] = log p_theta(r_i | p_j)         (sum over the reasoning tokens of r_i)

With ``|r_i|`` the number of reasoning tokens of r_i:

* ``reasoning/cond_entropy`` ~= H(R | P) per token, in nats:
  ``(1/n) sum_i  -L[i, i] / |r_i|``  (the reasoning's surprisal under its own prompt;
  the sampled reasoning is a draw from p(. | p_i), so this is a Monte-Carlo estimate).
* ``reasoning/mutual_info`` ~= I(P; R) per sequence, in nats:
  ``(1/n) sum_i [ L[i, i] - log( (1/n) sum_j exp L[i, j] ) ]``
  -- the log-ratio of the reasoning's likelihood under its own prompt to its likelihood
  under the batch's prompt mixture (an InfoNCE-style estimate, bounded above by
  ``log n``; ``reasoning/mutual_info_max`` logs that bound). A policy that ignores its
  prompt has L[i, j] = L[i, i] for all j and MI = 0 exactly.
* ``reasoning/retrieval_acc``: the fraction of i with ``argmax_j L[i, j] = i`` -- can the
  prompt be told from the reasoning alone (chance: 1/n)?

The reasoning span is the ``<think>...</think>`` part of the first response of each
sample (the thought tokens, after ``<think>``, through ``</think>``), or the whole first
response when there is no thought. Scored sequences are ``p_j + response_i[:end_i]`` so
the tokens before the span (``<think>`` itself) condition the span as in generation.
Identical prompts (the bandit asks one question) make MI 0 by construction: the metric
is informative only where prompts differ (grids, countdown).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import Tensor

from ragen.models.logprobs import sequence_logprobs

__all__ = ["mi_from_logprobs", "reasoning_span", "first_turn", "cross_prompt_logprobs"]

OPEN, CLOSE = "<think>", "</think>"


def mi_from_logprobs(L: Tensor, lengths: Tensor) -> dict[str, float]:
    """The statistics above from the cross-scoring matrix.

    Args:
        L: ``(n, n)`` float, ``L[i, j] = log p(r_i | p_j)`` summed over r_i's tokens.
        lengths: ``(n,)`` the token count |r_i| of each reasoning (>= 1).
    Returns ``reasoning/cond_entropy`` (nats/token), ``reasoning/mutual_info`` (nats),
    ``reasoning/mutual_info_max`` (log n), ``reasoning/retrieval_acc`` and
    ``reasoning/tokens`` (mean |r_i|) as python floats.
    """
    L = L.double()
    n = L.shape[0]
    if L.shape != (n, n) or n < 1:
        raise ValueError(f"L must be a non-empty square matrix, got {tuple(L.shape)}")
    diag = torch.diagonal(L)
    lengths = lengths.double().clamp(min=1)
    marginal = torch.logsumexp(L, dim=1) - math.log(n)  # log (1/n) sum_j p(r_i | p_j)
    return {
        "reasoning/cond_entropy": float((-diag / lengths).mean()),
        "reasoning/mutual_info": float((diag - marginal).mean()),
        "reasoning/mutual_info_max": math.log(n),
        "reasoning/retrieval_acc": float(
            (L.argmax(dim=1) == torch.arange(n, device=L.device)).double().mean()
        ),
        "reasoning/tokens": float(lengths.mean()),
    }


def first_turn(input_ids: Sequence[int], response_mask: Sequence[int]):
    """``(prompt_ids, response_ids)`` of a sample's first turn: the ids before the first
    sampled id, and the first contiguous run of sampled ids; ``None`` if it has none."""
    try:
        start = list(response_mask).index(1)
    except ValueError:
        return None
    end = start
    while end < len(response_mask) and response_mask[end]:
        end += 1
    return list(input_ids[:start]), list(input_ids[start:end])


def reasoning_span(response_ids: Sequence[int], tokenizer) -> tuple[int, int]:
    """``(start, end)``: token indices of the thought inside ``response_ids``.

    Token k is in the span when the text it decodes to lies after ``<think>`` and up to
    the end of ``</think>``; found by decoding prefixes (responses are short), so it is
    exact for any tokenizer that decodes prefix by prefix. No complete think block: the
    whole response ``(0, len)``.
    """
    n = len(response_ids)
    text = tokenizer.decode(list(response_ids), skip_special_tokens=False)
    a = text.find(OPEN)
    b = text.find(CLOSE, a + len(OPEN)) if a >= 0 else -1
    if a < 0 or b < 0:
        return 0, n
    lo, hi = a + len(OPEN), b + len(CLOSE)
    start, end = n, n
    for k in range(1, n + 1):
        chars = len(tokenizer.decode(list(response_ids[:k]), skip_special_tokens=False))
        if start == n and chars > lo:
            start = k - 1  # token k-1 is the first to reach past "<think>"
        if chars >= hi:
            end = k
            break
    if start >= end:
        return 0, n
    return start, end


@torch.no_grad()
def cross_prompt_logprobs(
    model,
    prompts: Sequence[Sequence[int]],
    responses: Sequence[Sequence[int]],
    spans: Sequence[tuple[int, int]],
    pad_id: int,
    temperature: float = 1.0,
    device: torch.device | str = "cpu",
    max_rows: int = 64,
) -> Tensor:
    """``L`` ``(n, n)``: ``L[i, j] = sum_{t in span_i} log p(response_i[t] | prompt_j, response_i[:t])``.

    Builds the n^2 right-padded rows ``prompt_j + response_i[:end_i]`` and scores only the
    span positions (``sequence_logprobs`` with a position mask), ``max_rows`` rows per
    forward pass. ``temperature``: the sampling temperature, as the trainer scores.
    """
    n = len(prompts)
    rows, masks = [], []
    for i in range(n):
        start, end = spans[i]
        resp = list(responses[i][:end])
        for j in range(n):
            p = list(prompts[j])
            rows.append(p + resp)
            masks.append([0] * (len(p) + start) + [1] * (end - start))
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    att = torch.zeros((len(rows), width), dtype=torch.long)
    pos = torch.zeros((len(rows), width), dtype=torch.long)
    for k, (r, m) in enumerate(zip(rows, masks)):
        ids[k, : len(r)] = torch.tensor(r)
        att[k, : len(r)] = 1
        pos[k, : len(m)] = torch.tensor(m)
    out = torch.zeros(len(rows), dtype=torch.float64)
    for s in range(0, len(rows), max_rows):
        sl = slice(s, s + max_rows)
        lp, _ = sequence_logprobs(
            model,
            ids[sl].to(device),
            att[sl].to(device),
            temperature=max(temperature, 1e-6),
            positions=pos[sl].to(device),
        )
        out[sl] = lp.double().sum(-1).cpu()
    return out.view(n, n)


def reasoning_stats(
    model,
    tokenizer,
    trajectories,
    num_samples: int,
    pad_id: int,
    temperature: float,
    device,
    seed: int,
) -> dict[str, float]:
    """The statistics of :func:`mi_from_logprobs` for a step's ``trajectories``: one
    sample per group (the group's first trajectory with a response), at most
    ``num_samples`` groups drawn with ``seed``; empty when fewer than 2 groups qualify."""
    by_group: dict[int, tuple] = {}
    for tr in trajectories:
        if tr.group_id in by_group or not tr.input_ids:
            continue
        turn = first_turn(tr.input_ids, tr.response_mask)
        if turn is not None and turn[1]:
            by_group[tr.group_id] = turn
    groups = sorted(by_group)
    if len(groups) < 2:
        return {}
    gen = torch.Generator().manual_seed(seed)
    pick = torch.randperm(len(groups), generator=gen)[:num_samples].tolist()
    pairs = [by_group[groups[k]] for k in sorted(pick)]
    prompts = [p for p, _ in pairs]
    responses = [r for _, r in pairs]
    spans = [reasoning_span(r, tokenizer) for r in responses]
    was_training = model.training
    model.eval()
    try:
        L = cross_prompt_logprobs(model, prompts, responses, spans, pad_id, temperature, device)
    finally:
        model.train(was_training)
    lengths = torch.tensor([e - s for s, e in spans], dtype=torch.float64)
    return mi_from_logprobs(L, lengths)
