"""The decode step with fixed shapes and addresses, replayed as a CUDA graph on a GPU.

    engine = StaticHFEngine(model, tokenizer, cuda_graphs=True)   # model.engine=static-graphs

Why: on a GPU a small model's decode step is launch-bound. SmolLM2-135M has 30 layers of
~25 kernels each, so a step is ~750 kernel launches (several ms of CPU time) around well
under a millisecond of arithmetic for a batch of 1,024 rows. A CUDA graph records the
step's kernels once and replays them with one launch. A graph reads and writes fixed
addresses with fixed shapes, so the step differs from :class:`~ragen.engines.direct.
DirectDecodeStep` in three ways, none of which changes what a row computes:

* it attends over the cache's WHOLE capacity, the columns not yet written masked out by
  the additive mask (``-inf``), so the K/V length is not a shape; the new column ``t``
  becomes visible by writing 0 into the mask, and the K/V are written at ``t`` with
  ``index_copy_`` from a tensor holding ``t``;
* the batch keeps its physical rows for the whole call. The engine's loop still drops
  finished rows from its LOGICAL batch by the same rule as ever (so it draws the same
  uniforms and samples the same ids); here a logical row is a view of its physical row
  (:meth:`GraphedDecode.compact` composes the index), and a finished row's physical row
  goes on computing a token nobody reads;
* the inputs (ids, positions, ``t``) are copied into static tensors before each replay.

The graph is captured at a call's first decode step (its K/V buffers are that call's)
and replayed for the rest of the call; a capture costs one warm-up step, the recording
and one replay. Off a CUDA device (or where the direct step cannot run) the engine keeps its usual
step; ``GraphedDecode(..., capture=False)`` runs the fixed-shape step eagerly, which is
how the CPU tests check it against the usual step (``tests/test_engines_graphs.py``).

NOT MEASURED: no GPU was available when this was written; the graph capture itself has
run on no device. It is opt-in (``model.engine=static-graphs``) until it has been.
"""

from __future__ import annotations

import logging

from .direct import _attention_out_and_mlp, _rotary
from .gqa_attention import gqa_decode_attention

log = logging.getLogger(__name__)


class GraphedDecode:
    """Fixed-shape decode steps over one call's preallocated layers (see the module doc).

    ``start(layers, attention)`` after the prefill (``attention``: the 0/1 mask of the
    prompt columns, one row per physical row), then per step ``step(ids, positions)``
    with the LOGICAL batch's ids and positions, and ``compact(index)`` where the engine
    drops logical rows. ``capture``: record and replay a CUDA graph (a CUDA device
    only); False runs the same step eagerly.
    """

    def __init__(self, direct, capture: bool = True) -> None:
        self.direct, self.capture = direct, capture
        self.graph = None

    # -- per call ---------------------------------------------------------------------------
    def start(self, layers, attention) -> None:
        import torch

        self.layers = layers
        first = layers[0]
        batch, capacity = first._key_buffer.shape[0], first.capacity
        device = first._key_buffer.device
        dtype = self.direct.target.lm_head.weight.dtype
        self.mask = torch.full((batch, capacity), float("-inf"), dtype=dtype, device=device)
        width = attention.shape[1]
        self.mask[:, :width].masked_fill_(attention.bool(), 0.0)
        self.length = first.length  # columns written (the prompt's)
        self.rows = torch.arange(batch, device=device)  # logical row -> physical row
        self.ids = torch.zeros(batch, dtype=torch.long, device=device)
        self.positions = torch.zeros(batch, dtype=torch.long, device=device)
        self.column = torch.zeros(1, dtype=torch.long, device=device)
        self.logits = None
        self.graph = None

    def compact(self, index) -> None:
        """The engine kept logical rows ``index``: a view, the physical rows stay."""
        self.rows = self.rows[index]

    def step(self, ids, positions):
        """Logits (b, V) of the logical rows after feeding ``ids`` at ``positions``."""
        if self.length >= self.layers[0].capacity:
            raise RuntimeError(
                f"KV cache capacity {self.layers[0].capacity} exceeded ({self.length + 1} positions)"
            )
        self.ids[self.rows] = ids
        self.positions[self.rows] = positions
        self.column.fill_(self.length)
        self.mask[:, self.length] = 0.0  # column t is visible from this step on
        if not self.capture:
            self.logits = self._fixed_step()
        elif self.graph is None:
            self._record()
        else:
            self.graph.replay()
        self.length += 1
        for layer in self.layers:
            layer.length = self.length
            layer._set_views()
        return self.logits[self.rows]

    # -- the step -----------------------------------------------------------------------------
    def _record(self) -> None:
        """Warm up on a side stream (allocator, lazy inits), then record the step."""
        import torch

        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            self.logits = self._fixed_step()  # the warm-up IS this step: same inputs
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):  # records, runs nothing
            self.logits = self._fixed_step()
        self.graph = graph
        graph.replay()  # fills the graph's logits (rewriting column t with the same K/V)

    def _fixed_step(self):
        """One decode step of every physical row at column ``self.column``, over the whole
        capacity (the direct step's arithmetic; attention by batched matmuls)."""
        import torch

        d = self.direct
        b = self.ids.shape[0]
        heads, kv_heads, dim = d.heads, d.kv_heads, d.head_dim
        half = dim // 2
        base = d.target.model
        h = base.embed_tokens(self.ids)
        cos, sin = base.rotary_emb(h, self.positions[:, None])
        sin = torch.cat([-sin[..., :half], sin[..., half:]], dim=-1)
        mask = self.mask[:, None, None, :]
        for layer, kv in zip(base.layers[: d.config.num_hidden_layers], self.layers):
            attn = layer.self_attn
            x = layer.input_layernorm(h)
            q = attn.q_proj(x).view(b, heads, dim)
            k = attn.k_proj(x).view(b, kv_heads, dim)
            v = attn.v_proj(x).view(b, kv_heads, dim)
            q, k = _rotary(q, cos, sin, half), _rotary(k, cos, sin, half)
            kv._key_buffer.index_copy_(2, self.column, k[:, :, None].to(kv._key_buffer.dtype))
            kv._value_buffer.index_copy_(2, self.column, v[:, :, None].to(kv._value_buffer.dtype))
            out, _ = gqa_decode_attention(
                attn,
                q[:, :, None],
                kv._key_buffer.to(q.dtype),
                kv._value_buffer.to(q.dtype),
                mask,
                scaling=attn.scaling,
            )
            h = _attention_out_and_mlp(layer, h, out.reshape(b, heads * dim))
        return d.target.lm_head(base.norm(h))
