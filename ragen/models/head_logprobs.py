"""Log-probs (and entropies) of chosen tokens straight from hidden states, in row chunks,
never holding the ``(N, V)`` logits.

A 135M model with a 49k vocabulary spends most of an RL micro-batch's memory on logits:
N wanted tokens x 49,152 x 4 bytes, twice over (the logits and their softmax), kept for
the backward pass. Here the LM head's matmul, the softmax and their gradients run over
chunks of ``chunk_rows`` rows; the forward keeps only the hidden states ``(N, H)``, the
per-row log-sum-exp and the mean tempered logit, and the backward recomputes each
chunk's logits. With ``s = (h W^T + b) / T`` (T the temperature):

    log p(y) = s_y - lse(s)                  d/ds_j = 1[j = y] - p_j
    H        = lse(s) - sum_j p_j s_j        d/ds_j = -p_j (s_j - sum_i p_i s_i)
    dh = (ds / T) W,   dW = (ds / T)^T h,   db = sum_rows ds / T

The results equal ``log_softmax(head(h) / T)`` gathered at ``y`` (and its entropy) within
float32 rounding (``tests/test_models_head_logprobs.py``). Double backward is not
supported.
"""

from __future__ import annotations

import torch
from torch import Tensor

from ragen.algo.logits import CPU_CHUNK_ELEMENTS, DEFAULT_CHUNK_ELEMENTS


def default_chunk_rows(hidden: Tensor, vocab: int) -> int:
    """Rows per chunk: ~1 MB of float32 logits on a CPU (its temporaries stay in cache,
    as in ``ragen.algo.logits``), 64 MB on an accelerator (fewer, larger kernels), and on
    a CPU never fewer than ``H / 4`` rows.

    Why the floor: here every chunk is also a matmul ``(rows, H) @ (H, V)`` that streams
    the whole ``(V, H)`` head from memory, so a chunk of few rows is bound by that read,
    not by arithmetic. A 49k vocabulary leaves the 1 MB rule 5 rows a chunk; ``H / 4``
    rows (144 for SmolLM2) keeps the head's read a small share of the chunk's work while
    its logits still stay near the cache. A small vocabulary (the tiny models') keeps the
    1 MB rule.
    """
    if hidden.device.type != "cpu":
        return max(1, DEFAULT_CHUNK_ELEMENTS // max(vocab, 1))
    return max(1, CPU_CHUNK_ELEMENTS // max(vocab, 1), hidden.shape[-1] // 4)


class _HeadLogProbs(torch.autograd.Function):
    @staticmethod
    def forward(ctx, hidden, weight, bias, labels, temperature, with_entropy, chunk_rows):
        rows = hidden.shape[0]
        logp = torch.empty(rows, dtype=torch.float32, device=hidden.device)
        lse = torch.empty_like(logp)
        mean_s = torch.empty_like(logp)  # sum_j p_j s_j, for the entropy and its gradient
        for start in range(0, rows, chunk_rows):
            rs = slice(start, min(start + chunk_rows, rows))
            s = _tempered(hidden[rs], weight, bias, temperature)
            lse[rs] = torch.logsumexp(s, dim=-1)
            logp[rs] = s.gather(-1, labels[rs, None]).squeeze(-1) - lse[rs]
            if with_entropy:
                p = torch.exp(s - lse[rs, None])
                mean_s[rs] = (p * s).sum(-1)
        ctx.save_for_backward(hidden, weight, bias, labels, lse, mean_s)
        ctx.temperature, ctx.with_entropy, ctx.chunk_rows = temperature, with_entropy, chunk_rows
        # the backward runs outside autocast: remember the forward's matmul dtype so that
        # the backward's three matmuls per chunk run in it too, as autocast's own
        # backward of a bf16 linear layer would (float32 there: 4x slower on a bf16 CPU)
        ctx.matmul_dtype = _autocast_dtype(hidden.device) or weight.dtype
        entropy = lse - mean_s if with_entropy else torch.zeros_like(logp)
        return logp, entropy

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_logp: Tensor, grad_entropy: Tensor):
        hidden, weight, bias, labels, lse, mean_s = ctx.saved_tensors
        T, rows = ctx.temperature, hidden.shape[0]
        low = ctx.matmul_dtype
        w_low = weight.to(low)  # one cast of the head for all chunks
        need_h, need_w, need_b = ctx.needs_input_grad[:3]
        grad_h = torch.empty_like(hidden) if need_h else None
        grad_w = (
            torch.zeros(weight.shape, dtype=torch.float32, device=weight.device) if need_w else None
        )
        grad_b = torch.zeros(weight.shape[0], dtype=torch.float32, device=weight.device) if need_b else None  # fmt: skip
        for start in range(0, rows, ctx.chunk_rows):
            rs = slice(start, min(start + ctx.chunk_rows, rows))
            h_low = hidden[rs].to(low)
            s = _tempered(h_low, w_low, bias, T)
            p = torch.exp(s - lse[rs, None])
            g = grad_logp[rs, None].float()
            ds = (-g * p).scatter_add(-1, labels[rs, None], g)  # d logp / ds, weighted
            if ctx.with_entropy and grad_entropy is not None:
                ds -= grad_entropy[rs, None].float() * p * (s - mean_s[rs, None])
            ds /= T  # through s = z / T
            ds_low = ds.to(low)
            if need_h:
                grad_h[rs] = (ds_low @ w_low).to(hidden.dtype)
            if need_w:  # accumulated in float32 whatever the matmul's dtype
                grad_w += (ds_low.T @ h_low).float()
            if need_b:
                grad_b += ds.sum(0)
        return (
            grad_h,
            grad_w.to(weight.dtype) if need_w else None,
            grad_b.to(bias.dtype) if need_b else None,
            None,
            None,
            None,
            None,
        )


def _autocast_dtype(device: torch.device) -> torch.dtype | None:
    """The dtype autocast gives matmuls on ``device`` now (bf16 under ``cpu_autocast``),
    or None outside autocast."""
    kind = device.type
    if kind in ("cpu", "cuda") and torch.is_autocast_enabled(kind):
        return torch.get_autocast_dtype(kind)
    return None


def _tempered(hidden: Tensor, weight: Tensor, bias: Tensor | None, temperature: float) -> Tensor:
    """``(head(hidden) / T)`` of one chunk, in float32 (the matmul in the weights' dtype)."""
    z = hidden.to(weight.dtype) @ weight.T
    if bias is not None:
        z = z + bias
    return z.float() / temperature


def head_logprobs(
    hidden: Tensor,
    head: torch.nn.Linear,
    labels: Tensor,
    temperature: float = 1.0,
    with_entropy: bool = False,
    chunk_rows: int | None = None,
) -> tuple[Tensor, Tensor | None]:
    """``log_softmax(head(hidden) / T)[labels]`` ``(N,)`` float32, and the entropies
    ``(N,)`` of those distributions when ``with_entropy`` (else None).

    hidden: ``(N, H)`` the final hidden states that predict the wanted tokens;
    head: the LM head, a plain :class:`torch.nn.Linear` ``(V, H)``; labels: ``(N,)``.
    Differentiable in ``hidden``, ``head.weight`` and ``head.bias``. ``chunk_rows``
    None: :func:`default_chunk_rows`.
    """
    if chunk_rows is None:
        chunk_rows = default_chunk_rows(hidden, head.weight.shape[0])
    logp, entropy = _HeadLogProbs.apply(
        hidden, head.weight, head.bias, labels, float(temperature), with_entropy, chunk_rows
    )
    return logp, (entropy if with_entropy else None)


def fusable_head(head) -> bool:
    """Whether ``head`` is a plain linear layer :func:`head_logprobs` can stand in for (a
    LoRA- or otherwise-wrapped head keeps the unfused path)."""
    return type(head) is torch.nn.Linear
