"""Reasoning-collapse statistics: how much the reasoning still depends on the prompt.

A policy caught in the echo trap writes the same thought whatever it reads. RAGEN-2
measures that on a step's own rollouts by cross-prompt scoring: the mutual information
I(X; Z) between prompts X and reasoning traces Z, estimated with one extra batched
forward pass and no gradient.

**What is scored.** Every rollout of the step: one (prompt, reasoning) pair per
training sample -- the first response of a full-history episode, or the one turn a
windowed sample holds (``rollout.context_window``) -- at most ``num_samples`` of them,
drawn at random with the step's seed when there are more. **Duplicate prompts** (the
members of a group see the same first prompt; the bandit shows one of two) are merged:
the K *distinct* prompts x_1..x_K are the columns, with weights w_k = (samples whose
prompt is x_k) / n, the batch's empirical prompt distribution. Identical prompts are
never counted as distinct inputs, which would credit the model with telling apart
prompts that do not differ.

With r_i the thought of sample i, c(i) the column of its own prompt and |r_i| its
token count, every thought is scored under every distinct prompt::

    L[i, k] = log p_theta(r_i | x_k)         (summed over the thought's tokens)

* ``reasoning/mutual_info`` ~= I(X; Z) per sequence (nats):
  ``(1/n) sum_i [ L[i, c(i)] - log sum_k w_k exp L[i, k] ]``: the log-ratio of the
  thought's likelihood under its own prompt to its likelihood under the batch's prompt
  mixture. A policy that ignores its prompt has ``L[i, k] = L[i, c(i)]`` for all k and
  MI = 0 exactly. The estimate cannot exceed H(w), the entropy of the prompt
  distribution (``reasoning/mutual_info_max``; log K for K equally frequent prompts):
  an estimate near it is *saturated* (the batch holds too few distinct prompts to
  measure more), so score enough samples that K is large where the thought is
  expected to say much about its prompt.
* ``reasoning/mutual_info_token``: the same with per-token log-likelihoods
  ``L[i, k] / |r_i|`` (RAGEN-2's headline form; it does not grow with thought length).
* ``reasoning/cond_entropy`` ~= H(Z | X) per token (nats):
  ``(1/n) sum_i -L[i, c(i)] / |r_i|`` (the sampled thought is a draw from p(. | x),
  so this is a Monte-Carlo estimate).
* ``reasoning/retrieval_acc``: the share of thoughts likeliest under their own prompt
  (``argmax_k L[i, k] = c(i)``); chance is 1/K.
* ``reasoning/prompts`` K, ``reasoning/samples`` n, ``reasoning/tokens`` mean |r_i|.

The reasoning span is the ``<think>...</think>`` part of the response (the thought
tokens after ``<think>``, through ``</think>``), or the whole response when there is no
complete thought. Scored rows are ``x_k + response_i[:end_i]`` so the tokens before the
span (``<think>`` itself) condition the span as in generation; the rows of one prompt
share it as a prefix, which :func:`~ragen.models.logprobs.sequence_logprobs` runs once.
Cost: K prompt prefixes plus n x K thoughts of |r| tokens, in one batched call for the
default 16 samples.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from ragen.models.logprobs import sequence_logprobs

__all__ = [
    "mi_from_logprobs",
    "reasoning_span",
    "first_turn",
    "cross_prompt_logprobs",
    "distinct_prompts",
    "reasoning_stats",
]

OPEN, CLOSE = "<think>", "</think>"


def mi_from_logprobs(
    L: Tensor, lengths: Tensor, own: Tensor | Sequence[int] | None = None
) -> dict[str, float]:
    """The statistics of the module docstring from the cross-scoring matrix.

    Args:
        L: ``(n, K)`` float, ``L[i, k] = log p(r_i | x_k)`` summed over r_i's tokens,
            over the K distinct prompts.
        lengths: ``(n,)`` the token count |r_i| of each thought (>= 1).
        own: ``(n,)`` the column of each thought's own prompt; ``None``: ``arange(n)``
            (a square L with one sample per prompt). The prompt weights are the
            columns' shares of ``own``.
    Returns ``reasoning/{mutual_info, mutual_info_token, mutual_info_max, cond_entropy,
    retrieval_acc, prompts, samples, tokens}`` as python floats.
    """
    L = L.double()
    if L.dim() != 2 or L.shape[0] < 1 or L.shape[1] < 1:
        raise ValueError(f"L must be a non-empty (n, K) matrix, got {tuple(L.shape)}")
    n, K = L.shape
    own = torch.arange(n) if own is None else torch.as_tensor(own, dtype=torch.long)
    if own.shape != (n,) or int(own.min()) < 0 or int(own.max()) >= K:
        raise ValueError(f"own must hold n={n} column indices in [0, {K}), got {own.tolist()}")
    counts = torch.bincount(own, minlength=K).double()
    if bool((counts == 0).any()):
        raise ValueError("every column of L must be some sample's own prompt")
    log_w = (counts / n).log()  # the batch's empirical prompt distribution
    lengths = lengths.double().clamp(min=1)
    rows = torch.arange(n)

    def mi(scores: Tensor) -> float:
        matched = scores[rows, own]
        marginal = torch.logsumexp(scores + log_w, dim=1)  # log sum_k w_k p(r_i | x_k)
        return float((matched - marginal).mean())

    w = counts / n
    return {
        "reasoning/mutual_info": mi(L),
        "reasoning/mutual_info_token": mi(L / lengths[:, None]),
        "reasoning/mutual_info_max": float(-(w * w.log()).sum()),  # H(w) >= any estimate
        "reasoning/cond_entropy": float((-L[rows, own] / lengths).mean()),
        "reasoning/retrieval_acc": float((L.argmax(dim=1) == own).double().mean()),
        "reasoning/prompts": float(K),
        "reasoning/samples": float(n),
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


def distinct_prompts(prompts: Sequence[Sequence[int]]) -> tuple[list[list[int]], list[int]]:
    """``(columns, own)``: the distinct prompts in order of first appearance, and the
    column of each input prompt (identical token ids are one prompt)."""
    index: dict[tuple[int, ...], int] = {}
    own = [index.setdefault(tuple(p), len(index)) for p in prompts]
    return [list(p) for p in index], own


@torch.no_grad()
def cross_prompt_logprobs(
    model,
    prompts: Sequence[Sequence[int]],
    responses: Sequence[Sequence[int]],
    spans: Sequence[tuple[int, int]],
    pad_id: int,
    temperature: float = 1.0,
    device: torch.device | str = "cpu",
    max_rows: int = 256,
    max_tokens: int = 32768,
) -> Tensor:
    """``L`` ``(n, K)``: ``L[i, k] = sum_{t in span_i} log p(response_i[t] | prompt_k,
    response_i[:t])`` for n responses and K prompts.

    The n x K right-padded rows ``prompt_k + response_i[:end_i]``, prompt by prompt,
    go through ``sequence_logprobs`` in calls of at most ``max_rows`` rows and
    ``max_tokens`` padded ids (the default step's 16 x 16 rows of ~100-id compact
    prompts in one call): it runs each distinct prompt once and hands its K/V to that
    prompt's rows, so batching prompts together costs no extra arithmetic, only fewer
    and larger calls (a GPU pays per call in launches and host syncs). The token cap
    bounds the rows' K/V copies for long prompts (a 1,000-id prompt: 32 rows a call).
    Only the span positions are scored. ``temperature``: the sampling temperature, as
    the trainer scores.
    """
    n, K = len(responses), len(prompts)
    cut = [list(responses[i][: spans[i][1]]) for i in range(n)]
    pairs = [(i, k) for k in range(K) for i in range(n)]  # prompt-major: a prompt's rows adjacent
    lengths = [len(prompts[k]) + len(cut[i]) for i, k in pairs]
    out = torch.zeros(n, K, dtype=torch.float64)
    for call in _calls(list(range(len(pairs))), lengths, max_rows, max_tokens):
        chunk = [pairs[j] for j in call]
        width = max(lengths[j] for j in call)
        ids = torch.full((len(chunk), width), pad_id, dtype=torch.long)
        att = torch.zeros((len(chunk), width), dtype=torch.long)
        pos = torch.zeros((len(chunk), width), dtype=torch.long)
        for r, (i, k) in enumerate(chunk):
            row = list(prompts[k]) + cut[i]
            ids[r, : len(row)] = torch.tensor(row)
            att[r, : len(row)] = 1
            pos[r, len(prompts[k]) + spans[i][0] : len(row)] = 1
        lp, _ = sequence_logprobs(
            model,
            ids.to(device),
            att.to(device),
            temperature=max(temperature, 1e-6),
            positions=pos.to(device),
        )
        sums = lp.double().sum(-1).cpu()
        rows_i = torch.tensor([i for i, _ in chunk])
        cols_k = torch.tensor([k for _, k in chunk])
        out[rows_i, cols_k] = sums
    return out


def _calls(items: list, lengths: list[int], max_rows: int, max_tokens: int) -> list[list]:
    """``items`` cut, in order, into calls of at most ``max_rows`` items whose padded
    size (items x the longest length) stays within ``max_tokens`` (one item at least)."""
    calls: list[list] = []
    chunk: list = []
    width = 0
    for item, length in zip(items, lengths):
        wider = max(width, length)
        if chunk and (len(chunk) >= max_rows or (len(chunk) + 1) * wider > max_tokens):
            calls.append(chunk)
            chunk, wider = [], length
        chunk.append(item)
        width = wider
    if chunk:
        calls.append(chunk)
    return calls


def scored_pairs(trajectories) -> list[tuple[list[int], list[int]]]:
    """One ``(prompt_ids, response_ids)`` per training sample with a response: the first
    turn of a full-history episode, or the turn a windowed sample holds."""
    pairs = []
    for tr in trajectories:
        if not tr.input_ids:
            continue
        turn = first_turn(tr.input_ids, tr.response_mask)
        if turn is not None and turn[1]:
            pairs.append(turn)
    return pairs


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
    """The statistics of :func:`mi_from_logprobs` for a step's ``trajectories``: every
    sample scored (at most ``num_samples``, drawn with ``seed``), duplicate prompts
    merged. Empty for fewer than 2 samples; with a single distinct prompt (nothing to
    tell apart) only the conditional entropy, token and sample counts."""
    pairs = scored_pairs(trajectories)
    if len(pairs) > num_samples:
        gen = torch.Generator().manual_seed(seed)
        pick = sorted(torch.randperm(len(pairs), generator=gen)[:num_samples].tolist())
        pairs = [pairs[k] for k in pick]
    columns, own = distinct_prompts([p for p, _ in pairs])
    if len(pairs) < 2:
        return {}
    responses = [r for _, r in pairs]
    spans = [reasoning_span(r, tokenizer) for r in responses]
    was_training = model.training
    model.eval()
    try:
        L = cross_prompt_logprobs(model, columns, responses, spans, pad_id, temperature, device)
    finally:
        model.train(was_training)
    lengths = torch.tensor([e - s for s, e in spans], dtype=torch.float64)
    out = mi_from_logprobs(L, lengths, own)
    if len(columns) < 2:  # one prompt: nothing to tell apart, no MI to report
        out = {k: v for k, v in out.items() if "mutual_info" not in k and "retrieval" not in k}
    return out
