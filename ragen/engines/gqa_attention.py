"""Decode attention for one new query per row, grouped-query aware (the static engines').

The attention of :class:`~ragen.engines.compiled.StaticHFEngine`'s decode step, under
transformers' ``AttentionInterface`` (:func:`register_attention`), and the fallback of
:class:`~ragen.engines.direct.DirectDecodeStep` where the C kernel of
:mod:`ragen.engines.cpu_attention` does not run. Its own module so that both engines use
it without importing each other.
"""

from __future__ import annotations

__all__ = ["ATTENTION_NAME", "gqa_decode_attention", "register_attention"]

#: the name our decode attention is registered under in transformers' AttentionInterface
ATTENTION_NAME = "ragen_gqa_decode"


def gqa_decode_attention(
    module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs
):
    """Attention for ONE new query per row, grouped-query aware; else plain SDPA.

    ``query`` (b, H, 1, D); ``key``/``value`` (b, H_kv, L, D), possibly views of a
    larger buffer (``buffer[:, :, :L]``); ``attention_mask`` additive (b, 1, 1, L).
    With G = H / H_kv query heads per kv head (head h reads kv head h // G)::

        s = (q_g @ K^T) * scaling + mask      (b * H_kv, G, L)
        out = softmax(s) @ V                  (b * H_kv, G, D) -> (b, 1, H, D)

    Returns ``(out, None)`` as transformers' attention functions do.
    """
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    b, heads, q_len, dim = query.shape
    kv_heads, length = key.shape[1], key.shape[2]
    if q_len != 1 or dropout or attention_mask is None or attention_mask.dim() != 4:
        return sdpa_attention_forward(
            module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **kwargs
        )
    import torch

    groups = heads // kv_heads
    scale = scaling if scaling is not None else dim**-0.5
    q = query.reshape(b * kv_heads, groups, dim)
    k = key.reshape(b * kv_heads, length, dim)  # a view: (b, H_kv) merge without a copy
    v = value.reshape(b * kv_heads, length, dim)
    scores = torch.bmm(q, k.transpose(1, 2)).view(b, kv_heads, groups, length)
    scores = scores * scale + attention_mask  # mask (b, 1, 1, L) broadcasts
    probs = torch.softmax(scores.float(), dim=-1).to(v.dtype).view(b * kv_heads, groups, length)
    out = torch.bmm(probs, v).view(b, 1, heads, dim)
    return out, None


def register_attention() -> bool:
    """Register :func:`gqa_decode_attention` (and SDPA's mask builder for prefill under
    the same name); False with a transformers that has no AttentionInterface."""
    try:
        from transformers import AttentionInterface
        from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, sdpa_mask
    except ImportError:
        return False
    AttentionInterface.register(ATTENTION_NAME, gqa_decode_attention)
    ALL_MASK_ATTENTION_FUNCTIONS.register(ATTENTION_NAME, sdpa_mask)
    return True
