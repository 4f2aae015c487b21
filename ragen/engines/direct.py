"""A decode step written out for the Llama family, without transformers' per-module glue.

    step = DirectDecodeStep.build(model)     # None for a model it does not cover
    logits = step(layers, mask, ids, positions)            # one decode step
    logits = step.prefill(layers, attention, ids, positions)   # a call's prompt block

One decode step of a Qwen2 / Llama / Mistral causal LM (``b`` rows, one new token each)
computed from the model's own submodules: the embedding, the rotary module, the
RMSNorms, every ``Linear`` (so PEFT LoRA layers and forward hooks on them still run)
and the LM head are CALLED as modules; only the glue between them is ours:

    h = embed(ids)                                        (b, E)
    cos, sin = rotary(h, positions)                       (b, 1, D) each
    per layer:
        x = input_norm(h)
        q, k, v = q_proj(x), k_proj(x), v_proj(x)         (b, H*D), (b, H_kv*D) x 2
        q, k = q*cos + roll(q, D/2)*sin_signed, same for k   (RoPE, see below)
        K[:, :, t], V[:, :, t] = k, v                     (in place, t = cache length)
        a = attention(q, K[:, :, :t+1], V[:, :, :t+1], mask)         (b, H*D)
        h = h + o_proj(a)
        h = h + down(act(gate(x')) * up(x')),  x' = post_norm(h)
    logits = lm_head(final_norm(h))                       (b, V)

It is the same arithmetic as transformers' modules in the same order (RoPE's
``rotate_half(x) = cat(-x2, x1)`` equals ``roll(x, D/2) * sign`` exactly, the sign
folded into ``sin`` once per step), so the logits equal the transformers step within
float rounding (``tests/test_engines_static.py``). ``attention`` is the C kernel of
:mod:`ragen.engines.cpu_attention` (CPU, fp32 queries, fp32 or bf16 buffers, ``kernel`` set), else
:func:`ragen.engines.gqa_attention.gqa_decode_attention`.

Why: the glue hands the attention the raw preallocated buffers and the 2-D mask, which
the C kernel needs (that is most of the gain, docs/notebook/2026-11-results-history.md,
"Decode step at memory speed"). On its own, skipping transformers' per-module overhead
(attention interface dispatch, mask utilities, ``DynamicCache.update``, output dataclasses,
``rotate_half``'s slices and cat) saved 0-4% of a ``tiny:nano`` step on the dev CPU:
with one thread the small ops were never the bulk of it.

:meth:`DirectDecodeStep.build` returns None (the caller keeps transformers' forward)
for anything it does not cover: another architecture (QK-norm, sliding window,
embedding scale, biased norms...), a module with forward hooks where the glue is ours
(the decoder layers, the attention and MLP modules, the model itself), a non-SiLU
activation.
"""

from __future__ import annotations

from .gqa_attention import gqa_decode_attention

#: ``config.model_type`` values whose decoder layer is exactly the glue above
SUPPORTED_MODEL_TYPES = ("qwen2", "llama", "mistral")


def _has_hooks(module) -> bool:
    return bool(module._forward_hooks or module._forward_pre_hooks)


def _global_hooks() -> bool:
    """Module hooks registered for every module (``register_module_forward_hook``)."""
    from torch.nn.modules import module as torch_module

    return bool(torch_module._global_forward_hooks or torch_module._global_forward_pre_hooks)


def _rotary(x, cos, sin, half: int):
    """RoPE as the module doc writes it: ``x * cos + roll(x, D/2) * (sign * sin)``."""
    return x * cos + x.roll(half, dims=-1) * sin


def _attention_out_and_mlp(layer, h, out):
    """The rest of a decoder layer after its attention: ``h + o_proj(out)``, then the
    residual SwiGLU MLP on its post-attention norm."""
    attn, mlp = layer.self_attn, layer.mlp
    h = h + attn.o_proj(out)
    x = layer.post_attention_layernorm(h)
    return h + mlp.down_proj(mlp.act_fn(mlp.gate_proj(x)) * mlp.up_proj(x))


class DirectDecodeStep:
    """The decode step of the module doc over one model's submodules.

    It keeps the model objects, not their parts: submodules are looked up at every
    step, so PEFT adapters injected later, or a swapped LM head, are what runs.
    """

    def __init__(self, model, target, config):
        self.model, self.target, self.config = model, target, config
        self.heads = config.num_attention_heads
        self.kv_heads = config.num_key_value_heads
        self.head_dim = getattr(config, "head_dim", None) or config.hidden_size // self.heads
        self.kernel = None  # the C decode attention (ragen.engines.cpu_attention), if used

    @classmethod
    def build(cls, model) -> DirectDecodeStep | None:
        """The step for ``model`` (a causal LM or a PEFT wrapper of one), or None when the
        model is outside what this glue reproduces (see the module doc)."""
        target = model.get_base_model() if hasattr(model, "get_base_model") else model
        config = getattr(target, "config", None)
        base = getattr(target, "model", None)
        if config is None or base is None or getattr(target, "lm_head", None) is None:
            return None
        if getattr(config, "model_type", None) not in SUPPORTED_MODEL_TYPES:
            return None
        if getattr(config, "hidden_act", None) != "silu":
            return None
        if any(t != "full_attention" for t in getattr(config, "layer_types", None) or []):
            return None
        if not all(hasattr(base, n) for n in ("embed_tokens", "rotary_emb", "norm", "layers")):
            return None
        for layer in base.layers:
            attn, mlp = getattr(layer, "self_attn", None), getattr(layer, "mlp", None)
            if attn is None or mlp is None or hasattr(attn, "q_norm"):
                return None
            if getattr(attn, "sliding_window", None) is not None:
                return None
            if not all(hasattr(attn, p) for p in ("q_proj", "k_proj", "v_proj", "o_proj")):
                return None
            if not all(hasattr(mlp, p) for p in ("gate_proj", "up_proj", "down_proj")):
                return None
        step = cls(model, target, config)
        return step if step.usable() else None

    def usable(self) -> bool:
        """False while a forward hook sits on a module whose forward the glue replaces
        (the model, a decoder layer, an attention or MLP block), or on every module."""
        base = self.target.model
        glue = [self.model, self.target, base]
        for layer in base.layers:
            glue += [layer, layer.self_attn, layer.mlp]
        return not (_global_hooks() or any(_has_hooks(m) for m in glue))

    def prefill(self, layers, attention, ids, positions):
        """The prompt block of a call: ``ids``, ``positions`` (b, S) fill columns
        ``[t, t + S)`` of the cache's preallocated layers after the ``t`` columns already
        there (reused prefixes, or none); ``attention`` (b, t + S) is the 0/1 mask of
        every column (0 on left padding). Returns the logits of the last column (b, V).

        Per layer, as transformers' forward computes it, with two differences that do not
        change the arithmetic of a real row:

        * the additive mask ``(b, 1, S, t + S)`` is built once per call: key column
          ``j`` is visible to the query in column ``c`` iff ``attention[j]`` and
          ``j <= c`` (causal, right-aligned after the reused prefix); a left-padding
          query, which would see nothing (a NaN row), sees itself. Transformers passed a
          boolean mask that SDPA turned into an additive one in every layer (``where``
          passes: ~15% of a prefill);
        * the attention reads the kv heads once (``enable_gqa``) instead of expanding
          K/V to every query head (``repeat_kv``'s copies: another ~10%).

        The K/V of the block are written in place, so the decode steps go on from there.
        """
        import torch
        import torch.nn.functional as F

        b, length = ids.shape
        heads, kv_heads, dim = self.heads, self.kv_heads, self.head_dim
        half = dim // 2
        base = self.target.model
        start, end = layers[0].length, attention.shape[1]
        if end != start + length:
            raise ValueError(f"prefill block of {length} columns after {start} != mask width {end}")
        if end > layers[0].capacity:
            raise RuntimeError(f"KV cache capacity {layers[0].capacity} exceeded ({end} positions)")
        h = base.embed_tokens(ids)  # (b, S, E)
        cos, sin = base.rotary_emb(h, positions)  # (b, S, D)
        sin = torch.cat([-sin[..., :half], sin[..., half:]], dim=-1)
        cos, sin = cos[:, None], sin[:, None]  # (b, 1, S, D): broadcast over heads
        columns = torch.arange(end, device=ids.device)
        query_columns = columns[start:, None]  # (S, 1)
        visible = attention.bool()[:, None, :] & (columns[None, :] <= query_columns)[None]
        visible |= (columns[None, :] == query_columns)[None]  # a padding query sees itself
        # additive, built once: SDPA would convert a boolean mask in every layer
        mask = h.new_zeros(visible.shape).masked_fill_(~visible, float("-inf"))[:, None]
        for layer, kv in zip(base.layers[: self.config.num_hidden_layers], layers):
            attn = layer.self_attn
            x = layer.input_layernorm(h)
            q = attn.q_proj(x).view(b, length, heads, dim).transpose(1, 2)  # (b, H, S, D)
            k = attn.k_proj(x).view(b, length, kv_heads, dim).transpose(1, 2)
            v = attn.v_proj(x).view(b, length, kv_heads, dim).transpose(1, 2)
            q, k = _rotary(q, cos, sin, half), _rotary(k, cos, sin, half)
            if not kv.is_initialized:
                kv.allocate(b, (kv_heads, dim), (kv_heads, dim), k)
            kv._key_buffer[:, :, start:end] = k
            kv._value_buffer[:, :, start:end] = v
            kv.length = end
            kv._set_views()
            # (a narrower kv_dtype store is widened: SDPA needs one dtype)
            out = F.scaled_dot_product_attention(
                q,
                kv.keys.to(q.dtype),
                kv.values.to(q.dtype),
                attn_mask=mask,
                scale=attn.scaling,
                enable_gqa=heads != kv_heads,
            )
            out = out.transpose(1, 2).reshape(b, length, heads * dim)
            h = _attention_out_and_mlp(layer, h, out)
        return self.target.lm_head(base.norm(h[:, -1]))

    def __call__(self, layers, mask, ids, positions):
        """``layers``: the cache's preallocated layers (K/V buffers ``(b, H_kv, C, D)``,
        ``length`` t filled); ``mask`` additive ``(b, 1, 1, t + 1)``; ``ids``,
        ``positions`` (b,). Writes column t of every layer and returns logits (b, V)."""
        import torch

        b = ids.shape[0]
        heads, kv_heads, dim = self.heads, self.kv_heads, self.head_dim
        half = dim // 2
        base = self.target.model
        h = base.embed_tokens(ids)  # (b, E)
        cos, sin = base.rotary_emb(h, positions[:, None])  # (b, 1, D): broadcast over heads
        # rotate_half(x) * sin == roll(x, D/2) * (sign * sin), sign = -1 on the first half
        sin = torch.cat([-sin[..., :half], sin[..., half:]], dim=-1)
        t = layers[0].length
        if t >= layers[0].capacity:
            raise RuntimeError(
                f"KV cache capacity {layers[0].capacity} exceeded ({t + 1} positions)"
            )
        kernel = self.kernel
        if kernel is not None and not kernel.supports(
            h, layers[0]._key_buffer, layers[0]._value_buffer, mask[:, 0, 0]
        ):
            kernel = None
        for layer, kv in zip(base.layers[: self.config.num_hidden_layers], layers):
            attn = layer.self_attn
            x = layer.input_layernorm(h)
            q = attn.q_proj(x).view(b, heads, dim)
            k = attn.k_proj(x).view(b, kv_heads, dim)
            v = attn.v_proj(x).view(b, kv_heads, dim)
            q, k = _rotary(q, cos, sin, half), _rotary(k, cos, sin, half)
            kv._key_buffer[:, :, t] = k
            kv._value_buffer[:, :, t] = v
            kv.length = t + 1
            if kernel is not None:
                out = kernel(
                    q, kv._key_buffer, kv._value_buffer, mask[:, 0, 0], t + 1, attn.scaling
                )
            else:
                # (a narrower kv_dtype store is widened: the matmuls need one dtype)
                keys = kv._key_buffer[:, :, : t + 1].to(q.dtype)
                values = kv._value_buffer[:, :, : t + 1].to(q.dtype)
                out, _ = gqa_decode_attention(
                    attn, q[:, :, None], keys, values, mask, scaling=attn.scaling
                )
                out = out.reshape(b, heads * dim)
            h = _attention_out_and_mlp(layer, h, out)
        for kv in layers:
            kv._set_views()
        return self.target.lm_head(base.norm(h))
