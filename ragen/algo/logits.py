"""Per-token log-probabilities and entropies from logits, without ``(B, T, V)`` float32 copies.

A full ``log_softmax`` of bfloat16 logits materializes a float32 ``(B, T, V)`` tensor (and
autograd keeps it): for a 150k vocabulary and 4k tokens that is 2.4 GB per sample. Here
both the forward and the backward pass walk over row chunks of at most
``chunk_elements`` logits, upcast only the chunk, and keep just the per-row
log-sum-exp (``(B, T)``) for the backward pass, which recomputes softmax chunk by chunk.
Peak extra memory is one float32 chunk plus the gradient itself.

    log p(y) = z_y - logsumexp(z)                d/dz_j = 1[j = y] - p_j
    H        = -sum_j p_j log p_j                d/dz_j = -p_j (log p_j + H)

Both return float32 (float64 for float64 logits); their gradient w.r.t. ``logits`` has
the logits' dtype. Double backward is not supported.

Chunk size: each row's arithmetic is the same whatever the chunk, so the results are
bitwise the same for any ``chunk_elements``; only speed and memory differ. On a CPU the
handful of full-size temporaries of each pass (shifted logits, their exp, products) are
memory-bound: kept to ~1 MB each (:data:`CPU_CHUNK_ELEMENTS`) they stay in the core's
cache, 2-4x faster than 64 MB chunks that stream through DRAM (fwd + bwd of log-probs
and entropies, one thread: 4,000 x 2,841 logits 1.14 s -> 0.37 s, 1,000 x 49,152 6.5 s
-> 1.7 s; docs/SPEED.md). On a GPU fewer, larger kernels win: :data:`DEFAULT_CHUNK_ELEMENTS`.
"""

from __future__ import annotations

import torch
from torch import Tensor

from ragen.algo.utils import compute_dtype

__all__ = ["logprobs_from_logits", "entropy_from_logits"]

DEFAULT_CHUNK_ELEMENTS = 1 << 24  # 16M logits = 64 MB of float32 per chunk (GPU)
CPU_CHUNK_ELEMENTS = 1 << 18  # 256k logits = 1 MB of float32: temporaries stay in cache


def _chunk_elements(logits: Tensor, chunk_elements: int | None) -> int:
    """``chunk_elements``, or the device's default for None (see the module doc)."""
    if chunk_elements is not None:
        return int(chunk_elements)
    return CPU_CHUNK_ELEMENTS if logits.device.type == "cpu" else DEFAULT_CHUNK_ELEMENTS


def _row_chunks(num_rows: int, vocab: int, chunk_elements: int):
    step = max(1, chunk_elements // max(vocab, 1))
    for start in range(0, num_rows, step):
        yield slice(start, min(start + step, num_rows))


class _LogProbs(torch.autograd.Function):
    @staticmethod
    def forward(ctx, logits: Tensor, labels: Tensor, chunk_elements: int) -> Tensor:
        rows, vocab = logits.shape
        out_dtype = compute_dtype(logits)
        out = torch.empty(rows, dtype=out_dtype, device=logits.device)
        lse = torch.empty(rows, dtype=out_dtype, device=logits.device)
        for rs in _row_chunks(rows, vocab, chunk_elements):
            z = logits[rs].to(out_dtype)
            lse[rs] = torch.logsumexp(z, dim=-1)
            out[rs] = z.gather(-1, labels[rs, None]).squeeze(-1) - lse[rs]
        ctx.save_for_backward(logits, labels, lse)
        ctx.chunk_elements = chunk_elements
        return out

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_out: Tensor):
        logits, labels, lse = ctx.saved_tensors
        rows, vocab = logits.shape
        grad = torch.empty_like(logits)
        for rs in _row_chunks(rows, vocab, ctx.chunk_elements):
            g = grad_out[rs, None]
            p = torch.exp(logits[rs].to(lse.dtype) - lse[rs, None])
            chunk = (-g * p).scatter_add(-1, labels[rs, None], g)
            grad[rs] = chunk.to(grad.dtype)
        return grad, None, None


class _Entropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, logits: Tensor, chunk_elements: int) -> Tensor:
        rows, vocab = logits.shape
        out_dtype = compute_dtype(logits)
        ent = torch.empty(rows, dtype=out_dtype, device=logits.device)
        lse = torch.empty(rows, dtype=out_dtype, device=logits.device)
        for rs in _row_chunks(rows, vocab, chunk_elements):
            z = logits[rs].to(out_dtype)
            lse[rs] = torch.logsumexp(z, dim=-1)
            log_p = z - lse[rs, None]
            p = log_p.exp()
            # p log p -> 0 where p = 0 (e.g. -inf logits), not NaN.
            ent[rs] = -torch.where(p > 0, p * log_p, 0.0).sum(-1)
        ctx.save_for_backward(logits, lse, ent)
        ctx.chunk_elements = chunk_elements
        return ent

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_out: Tensor):
        logits, lse, ent = ctx.saved_tensors
        rows, vocab = logits.shape
        grad = torch.empty_like(logits)
        for rs in _row_chunks(rows, vocab, ctx.chunk_elements):
            log_p = logits[rs].to(lse.dtype) - lse[rs, None]
            p = log_p.exp()
            chunk = -grad_out[rs, None] * torch.where(p > 0, p * (log_p + ent[rs, None]), 0.0)
            grad[rs] = chunk.to(grad.dtype)
        return grad, None


def logprobs_from_logits(
    logits: Tensor, labels: Tensor, chunk_elements: int | None = None
) -> Tensor:
    """log softmax(logits)[label] per position: ``(B, T, V), (B, T) -> (B, T)``.

    Any leading shape works (``(..., V), (...) -> (...)``). ``labels`` are int64 token ids
    in [0, V). Memory-lean in forward and backward (see module docstring);
    ``chunk_elements`` None: the device's default.
    """
    if not isinstance(logits, Tensor) or not isinstance(labels, Tensor):
        raise TypeError("logits and labels must be torch.Tensors")
    if tuple(labels.shape) != tuple(logits.shape[:-1]):
        raise ValueError(
            f"labels shape {tuple(labels.shape)} must equal logits shape without the vocab "
            f"dim, {tuple(logits.shape[:-1])}"
        )
    if labels.dtype.is_floating_point:
        raise TypeError(f"labels must be integer token ids, got {labels.dtype}")
    lead, vocab = logits.shape[:-1], logits.shape[-1]
    flat = _LogProbs.apply(
        logits.reshape(-1, vocab),
        labels.reshape(-1).long(),
        _chunk_elements(logits, chunk_elements),
    )
    return flat.reshape(lead)


def entropy_from_logits(logits: Tensor, chunk_elements: int | None = None) -> Tensor:
    """Entropy of softmax(logits) per position: ``(B, T, V) -> (B, T)`` (any leading shape).

    H = logsumexp(z) - sum_j softmax(z)_j z_j = -sum_j p_j log p_j, in nats.
    Memory-lean in forward and backward (see module docstring); ``chunk_elements`` None:
    the device's default.
    """
    if not isinstance(logits, Tensor):
        raise TypeError("logits must be a torch.Tensor")
    if logits.dim() < 1:
        raise ValueError("logits must have a vocab dimension")
    lead, vocab = logits.shape[:-1], logits.shape[-1]
    chunk = _chunk_elements(logits, chunk_elements)
    return _Entropy.apply(logits.reshape(-1, vocab), chunk).reshape(lead)
