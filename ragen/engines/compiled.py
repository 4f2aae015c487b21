"""A faster decode step for :class:`~ragen.engines.hf.HFEngine`: static buffers, a direct
Llama-family step with a streaming C attention kernel, and (optionally) a compiled step.

    engine = StaticHFEngine(model, tokenizer)                  # model.engine=static
    engine = StaticHFEngine(model, tokenizer, compile=True)    # model.engine=compiled

Same interface, same outputs as ``HFEngine`` (the same sampled ids for the same seed,
log-probs equal within ~1e-6; ``tests/test_engines_static.py``; the kernels differ, so
a draw whose uniform lands within float rounding of a CDF boundary can flip: 1 row of
128 at step 60 of 64 in ``bench.bench_generate --size micro`` with the transformers
step, none with the direct one): prefix reuse across turns, per-row finishing, stop
strings and seeded sampling are the base class's code. The decode step differs, and
where the direct step runs, the prefill's forward too
(:meth:`ragen.engines.direct.DirectDecodeStep.prefill`: one additive mask per call,
grouped-query SDPA without K/V copies; ``direct_prefill=False`` keeps transformers'
forward for it). What the decode step changes, from ``torch.profiler`` traces of the step of
128 rows of ``tiny:nano`` (one thread):

* the decode attention. ``scaled_dot_product_attention`` with one query per row read
  the K/V views through its long-query kernel, ~1.6 ms per layer for 16 MB of K/V
  (~10 GB/s). :func:`~ragen.engines.gqa_attention.gqa_decode_attention` computes the
  same softmax with two batched matmuls straight on the preallocated buffers (the query heads of a group share one
  read of their kv head): ~1.2 ms per layer (256 tiny GEMMs per call, K/V at ~14
  GB/s). On CPU with an fp32 model the direct step (next item) replaces it by
  :mod:`ragen.engines.cpu_attention`: two C loops that read each K and V row once,
  sequentially, and skip each row's left padding, at about the rate a plain
  streaming read gets (~0.9 ms per layer under load); the matmul version stays the
  fallback (no C compiler, a GPU, a bf16 model);
* the glue. For Qwen2 / Llama / Mistral models :class:`ragen.engines.direct.
  DirectDecodeStep` runs the step from the model's own submodules (embedding, rotary,
  norms, every Linear and the LM head are called as modules, so hooks on them and
  PEFT adapters work) without transformers' per-module dispatch, mask utilities and
  cache bookkeeping; other models, or a hook on a module whose forward it replaces,
  keep transformers' forward with
  :func:`~ragen.engines.gqa_attention.gqa_decode_attention` registered in its
  ``AttentionInterface`` (``direct=False`` forces that path);
* transformers rebuilt a 4-D mask from the 2-D 0/1 mask every step (and ``torch.cat``
  grew it by one column). Here an additive ``(b, capacity)`` mask is built ONCE per
  call (``-inf`` on left padding, 0 elsewhere) and each step passes its first
  ``length`` columns as a 4-D view, which transformers uses as is;
* (shared with ``HFEngine``, so not this class's doing) ``torch.multinomial``, 6.4 ms
  per step, became the inverse-CDF draw of ``sample_next_token`` (0.7 ms), and the
  stop-string tail decode runs only for rows whose new token can end a stop string.

``compile=True`` wraps the step (transformers' model forward: dynamo cannot trace the
ctypes kernel, so the compiled engine does not use the direct step; the draw stays
outside, so a seeded generator is never traced) in ``torch.compile`` with inductor. K/V lengths
grow by one each step, so the length is a dynamic dimension and one graph serves a
whole call; the batch is whatever the base loop's row dropping leaves. If compiling
fails (no C++ compiler, an unsupported model), the engine says so once and runs the
step uncompiled. Compile time is paid once per process and reported in
``compile_seconds``.

CUDA graphs (``compile_options={"mode": "reduce-overhead"}``) need shapes that do not
change between steps; with the growing K/V length they would record a graph per
length, so they are not the default. The fixed-shape variant (K/V written at a tensor
position with ``index_copy_``, every step attending over the whole capacity under the
mask) was prototyped on CPU: it compiled (104 s under load) to 10.2 ms/step against
12.5 ms uncompiled, no better than the dynamic graph, and no GPU was available to
measure the case it exists for.
"""

from __future__ import annotations

import logging
import time

from ragen.errors import ConfigError
from ragen.models.attention import attention_implementation, config_of
from ragen.models.kv_cache import cache_arg

from .base import ENGINE_CHOICES
from .cpu_attention import decode_attention_kernel
from .direct import DirectDecodeStep
from .gqa_attention import ATTENTION_NAME, register_attention
from .graphs import GraphedDecode
from .hf import HFEngine, _preallocated_layers, make_kv_cache

log = logging.getLogger(__name__)


class StaticHFEngine(HFEngine):
    """:class:`HFEngine` with the faster decode step of this module (see its doc).

    ``compile``: False (uncompiled, ``model.engine=static``), True (``torch.compile``
    the step, ``model.engine=compiled``); ``compile_options`` override the arguments of
    ``torch.compile`` (e.g. ``{"backend": "aot_eager"}``, which the tests use: the same
    graph capture without inductor's C++ build). ``compile_seconds`` is the time of the
    first compiled step (the compile, plus one step; a later recompile, e.g. for a batch
    of one row, is not counted).

    ``direct`` (default True): the direct Llama-family step where the model allows it
    (never with ``compile``), for the decode steps and (``direct_prefill``, default
    True) the prefill; ``attention_kernel`` (default True): its C decode
    attention on CPU for an fp32 model. Both exist to measure each part
    (``bench.bench_generate`` variants ``static-modules`` / ``static-nokernel``).

    ``bf16_matmuls`` / ``bf16_kv`` (default False; both: ``model.engine=static-bf16``):
    run the direct step's Linear layers and LM head under bf16 autocast (2-4x faster
    matmuls with avx512_bf16), and store the KV cache in bf16 (half the bytes the
    attention streams; only where the C kernel reads it, which widens each element
    exactly; the prefill widens a copy). The residual stream, norms, RoPE, softmax and
    attention arithmetic stay fp32. NOT exact: log-probs differ from the trainer's fp32
    recompute by ~1e-3 on average, ~5e-3 at most, and most rows draw other ids within a
    few steps. Requested where the direct step (or the kernel) is unavailable, they log
    a warning and decode in the model's dtype.
    """

    def __init__(
        self,
        model,
        tokenizer,
        *args,
        compile: bool = False,
        compile_options: dict | None = None,
        direct: bool = True,
        attention_kernel: bool = True,
        bf16_matmuls: bool = False,
        bf16_kv: bool = False,
        direct_prefill: bool = True,
        cuda_graphs: bool = False,
        **kwargs,
    ):
        super().__init__(model, tokenizer, *args, **kwargs)
        self._config = config_of(model)
        # only for models whose attention dispatches through transformers' interface
        dispatches = getattr(self._config, "_attn_implementation", None) in ("sdpa", "eager")
        self._attention = ATTENTION_NAME if dispatches and register_attention() else None
        # a model with sliding-window / linear-attention layers keeps the base step
        self._static = _preallocated_layers(make_kv_cache(model, 1)) is not None
        # the compiled step keeps transformers' forward (dynamo cannot trace the C kernel)
        use_direct = direct and self._static and not compile
        self._direct = DirectDecodeStep.build(model) if use_direct else None
        self.direct_prefill = bool(direct_prefill)
        if self._direct is not None and attention_kernel and self.device.type == "cpu":
            self._direct.kernel = decode_attention_kernel()
        # opt-in, NOT exact: the direct step's matmuls under bf16 autocast, K/V stored in
        # bf16 (the latter only where the C kernel reads them); see the class doc
        self.bf16_matmuls = bool(bf16_matmuls) and self._direct is not None
        if bf16_kv and self._direct is not None and self._direct.kernel is not None:
            import torch

            self.kv_dtype = torch.bfloat16
        if (bf16_matmuls and not self.bf16_matmuls) or (bf16_kv and self.kv_dtype is None):
            log.warning(
                "bf16 decoding needs the direct decode step%s, unavailable for this "
                "model/device; decoding in the model's dtype",
                " and the CPU attention kernel" if bf16_kv else "",
            )
        # opt-in: the fixed-shape step replayed as a CUDA graph (ragen.engines.graphs);
        # a CUDA device, the direct step, and K/V in the model's dtype
        self._graphs = None
        if cuda_graphs:
            if self.device.type == "cuda" and self._direct is not None and self.kv_dtype is None:
                self._graphs = GraphedDecode(self._direct, capture=True)
            else:
                log.warning(
                    "CUDA graphs need a CUDA device and the direct decode step (a Qwen2 / "
                    "Llama / Mistral model, K/V in the model's dtype); decoding without them"
                )
        self._graphs_on = False  # whether this call's decode runs the graphed step
        self.compile = bool(compile)
        self.compile_options = dict(compile_options or {})
        self.compile_seconds = 0.0
        self._compiled = None
        self._first_call = False  # the next compiled step is the first (times the compile)
        self._compile_failed = False

    # -- overrides of HFEngine's decode step -----------------------------------------------
    def _decode_mask(self, attention, capacity: int):
        """Additive ``(b, capacity)`` mask: -inf on left padding, 0 on every other column
        (columns past the current length are never read: each step slices)."""
        import torch

        if not self._static:
            return super()._decode_mask(attention, capacity)
        dtype = self._dtype()
        mask = torch.zeros((attention.shape[0], capacity), dtype=dtype, device=attention.device)
        mask[:, : attention.shape[1]].masked_fill_(attention == 0, float("-inf"))
        return mask

    def _start_decode(self, cache, attention, capacity: int):
        """The graphed step takes over this call's decode when it can run (its layers
        preallocated, the direct step usable); else the additive mask of the usual one."""
        layers = _preallocated_layers(cache)
        self._graphs_on = bool(
            self._graphs is not None and layers is not None and self._direct.usable()
        )
        if self._graphs_on:
            self._graphs.start(layers, attention)
            return attention
        return super()._start_decode(cache, attention, capacity)

    def _compact(self, cache, index) -> None:
        if self._graphs_on:  # the physical rows stay; the logical batch is a view
            self._graphs.compact(index)
            return
        super()._compact(cache, index)

    def _physical_row(self, b: int) -> int:
        return int(self._graphs.rows[b]) if self._graphs_on else b

    def _prefill(self, cache, attention, ids, positions):
        """The direct step's prefill (:meth:`DirectDecodeStep.prefill`) where the direct
        step runs; transformers' forward otherwise. Always fp32 arithmetic (the opt-in
        bf16 matmuls are the decode step's only)."""
        layers = _preallocated_layers(cache)
        if (
            not self.direct_prefill
            or layers is None
            or self._direct is None
            or not self._direct.usable()
        ):
            return super()._prefill(cache, attention, ids, positions)
        return self._direct.prefill(layers, attention, ids, positions)

    def _decode_step(self, cache, attention, ids, positions):
        if self._graphs_on:
            return attention, self._graphs.step(ids, positions)
        if not self._static:
            return super()._decode_step(cache, attention, ids, positions)
        length = cache.get_seq_length() + 1
        step = self._step_function()
        tic = time.perf_counter() if self._first_call else None
        logits = step(cache, attention[:, None, None, :length], ids, positions)
        if tic is not None:
            self.compile_seconds += time.perf_counter() - tic
            self._first_call = False
        return attention, logits

    # -- the step ---------------------------------------------------------------------------
    def _forward(self, cache, mask4d, ids, positions):
        if self._direct is not None and self._direct.usable():
            if not self.bf16_matmuls:
                return self._direct(cache.layers, mask4d, ids, positions)
            import torch

            with torch.autocast(self.device.type, dtype=torch.bfloat16):
                return self._direct(cache.layers, mask4d, ids, positions).float()
        with attention_implementation(self._config, self._attention):
            out = self.model(
                input_ids=ids.unsqueeze(-1),
                attention_mask=mask4d,
                position_ids=positions.unsqueeze(-1),
                **cache_arg(self.model, cache),
                use_cache=True,
            )
        return out.logits[:, -1, :]

    def _step_function(self):
        if not self.compile or self._compile_failed:
            return self._forward
        if self._compiled is None:
            try:
                import torch

                options = {"dynamic": True, **self.compile_options}
                self._compiled = torch.compile(self._forward, **options)
                self._first_call = True
            except Exception as exc:  # noqa: BLE001 -- any failure means: run uncompiled
                return self._fall_back(exc)
        return self._guarded

    def _guarded(self, *args):
        try:
            return self._compiled(*args)
        except Exception as exc:  # noqa: BLE001
            self._fall_back(exc)
            return self._forward(*args)

    def _fall_back(self, exc):
        if not self._compile_failed:
            log.warning(
                "torch.compile of the decode step failed (%s: %s); decoding uncompiled",
                type(exc).__name__,
                str(exc).splitlines()[0] if str(exc) else "",
            )
        self._compile_failed = True
        return self._forward

    def _dtype(self):
        import torch

        try:
            return next(self.model.parameters()).dtype
        except StopIteration:
            return torch.float32


def make_hf_engine(model, tokenizer, engine: str = "static", **kwargs) -> HFEngine:
    """The token engine named by ``engine`` (one of :data:`ENGINE_CHOICES`) over ``model``.

    All three sample the same ids for the same seed (up to float-rounding flips, see the
    module doc); ``static`` is the default: 1.95x ``before`` per step on the dev CPU for
    ``tiny:nano`` (1.64x for ``tiny:micro``), faster than ``compiled`` (which keeps
    transformers' forward), and nothing to compile but the ~1 s C kernel, once per
    machine; ``compiled`` adds a one-off compile of seconds to minutes.
    """
    if engine == "eager":
        return HFEngine(model, tokenizer, **kwargs)
    if engine in ("static", "compiled"):
        return StaticHFEngine(model, tokenizer, compile=engine == "compiled", **kwargs)
    if engine == "static-bf16":
        return StaticHFEngine(model, tokenizer, bf16_matmuls=True, bf16_kv=True, **kwargs)
    if engine == "static-graphs":
        return StaticHFEngine(model, tokenizer, cuda_graphs=True, **kwargs)
    raise ConfigError(f"unknown engine {engine!r}; choose one of {', '.join(ENGINE_CHOICES)}")
