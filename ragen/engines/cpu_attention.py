"""Decode attention on CPU as two streaming C loops (built once with the system C compiler).

    attend = decode_attention_kernel()        # None: no compiler / not buildable here
    out = attend(q, key_buffer, value_buffer, mask, length, scale)   # (b, H * D)

Why: a decode step attends ONE query per row over that row's whole K/V. As two batched
matmuls (``ragen.engines.gqa_attention.gqa_decode_attention``) that is ``b * H_kv`` tiny
GEMMs per product; with K/V coming from memory (every layer's K/V is read once per
step, ~15 MB per layer for 128 rows of ``tiny:nano`` at a 230-token context, more than
the caches hold) they ran at ~10 GB/s on the dev CPU, 2.6x slower than a plain
streaming read of the same bytes (``docs/notebook/2026-11-results-history.md``,
"Decode step at memory speed"). The loops here read each K row and each V row once, sequentially:

    s[r, h, g, l] = scale * <q[r, h*G + g], K[r, h, l]> + mask[r, l]    (scores)
    p = softmax(s, over l)                                               (torch)
    out[r, h*G + g] = sum_l p[r, h, g, l] * V[r, h, l]                   (values)

with ``r`` a row, ``h`` a kv head, ``g`` one of the G = H / H_kv query heads sharing
it (grouped-query attention: the G queries share one read of K and V), ``l`` < length.
K/V buffers may be fp32 or bf16 (``StaticHFEngine(bf16_kv=True)``, opt-in): a bf16
element is widened to fp32 exactly as it is read, all arithmetic is fp32.
The softmax stays in torch (vectorized exp). Same formula as transformers' eager and
SDPA attention; the dot products are summed in another order (the compiler vectorizes
the reduction), so scores agree within float rounding, not bit for bit.

The source is compiled on first use with ``$CC`` (default ``cc``) into the user cache
(``$XDG_CACHE_HOME/ragen/kernels``, else ``~/.cache/ragen/kernels``), keyed by a hash
of the source, the flags and the CPU, and loaded with ``ctypes`` (no torch headers,
~1 s to build). ctypes releases the GIL, so with several torch threads the rows are
split over a thread pool. When there is no compiler or the build fails, the function
returns None and says why once; callers fall back to the batched matmuls.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import logging
import os
import platform
import subprocess
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

log = logging.getLogger(__name__)

_COMMON = r"""
#include <stddef.h>

/* One (row, kv head) block: K rows kk[l * D + d], queries qq[g * D + d], scores
   s[g * L + l]. D is a compile-time constant in the specializations below, so the
   d loops unroll and vectorize; four positions at a time give the four horizontal
   sums independent chains. */
/* Software prefetch a fixed distance ahead in the K/V rows (one cache line per
   prefetch; the loops read 4 * D or D floats per iteration, so for D >= 16 this
   covers every line): the hardware prefetcher restarts at every (row, head) block. */
#define PREFETCH_AHEAD 512
#define PREFETCH(ptr) __builtin_prefetch((ptr), 0, 0)

#define DOT(a, b, D, out)                                                        \
    do {                                                                         \
        float acc_ = 0.f;                                                        \
        for (long d = 0; d < (D); ++d) acc_ += (a)[d] * LD((b)[d]);              \
        (out) = acc_;                                                            \
    } while (0)

#define SCORES_BLOCK(D)                                                          \
    for (long g = 0; g < groups; ++g) {                                          \
        const float *qg = qq + g * (D);                                          \
        float *sg = s + g * length;                                              \
        long l = 0;                                                              \
        for (; l < start; ++l) sg[l] = m[l]; /* -inf: K not read */              \
        for (; l + 4 <= length; l += 4) {                                        \
            float a0, a1, a2, a3;                                                \
            PREFETCH(kk + (l + 4) * (D) + PREFETCH_AHEAD);                       \
            DOT(qg, kk + (l + 0) * (D), D, a0);                                  \
            DOT(qg, kk + (l + 1) * (D), D, a1);                                  \
            DOT(qg, kk + (l + 2) * (D), D, a2);                                  \
            DOT(qg, kk + (l + 3) * (D), D, a3);                                  \
            sg[l + 0] = a0 * scale + m[l + 0];                                   \
            sg[l + 1] = a1 * scale + m[l + 1];                                   \
            sg[l + 2] = a2 * scale + m[l + 2];                                   \
            sg[l + 3] = a3 * scale + m[l + 3];                                   \
        }                                                                        \
        for (; l < length; ++l) {                                                \
            float a0;                                                            \
            DOT(qg, kk + l * (D), D, a0);                                        \
            sg[l] = a0 * scale + m[l];                                           \
        }                                                                        \
    }

/* Values: the G output rows accumulate in a local array (no aliasing with V). */
#define VALUES_BLOCK(D)                                                          \
    {                                                                            \
        float acc[groups * (D)];                                                 \
        for (long i = 0; i < groups * (D); ++i) acc[i] = 0.f;                    \
        for (long l = start; l < length; ++l) {                                  \
            const KV_T *vl = vv + l * (D);                                       \
            PREFETCH(vl + PREFETCH_AHEAD);                                       \
            for (long g = 0; g < groups; ++g) {                                  \
                const float w = pp[g * length + l];                              \
                float *ag = acc + g * (D);                                       \
                for (long d = 0; d < (D); ++d) ag[d] += w * LD(vl[d]);           \
            }                                                                    \
        }                                                                        \
        for (long i = 0; i < groups * (D); ++i) o[i] = acc[i];                   \
    }

/* Columns before a row's first finite mask entry (its left padding) weigh exactly 0
   after the softmax: their K and V are not read. */
static long first_unmasked(const float *m, long length) {
    long start = 0;
    while (start < length && m[start] == -__builtin_inff()) ++start;
    return start;
}

/* bf16 -> fp32 is exact: the bf16 bits are the float's upper half. */
static inline float bf16_to_float(unsigned short x) {
    union { unsigned int u; float f; } c;
    c.u = (unsigned int)x << 16;
    return c.f;
}

@FUNCTIONS@
"""

#: the two kernels, instantiated for fp32 and bf16 K/V buffers (see _SOURCE)
_FUNCTIONS = r"""
void decode_scores@S@(const float *q, const KV_T *k, const float *mask, float *scores,
                   long r0, long r1, long kv_heads, long groups, long dim, long cap,
                   long length, long mask_stride, float scale) {
    for (long r = r0; r < r1; ++r) {
        const float *m = mask + r * mask_stride;
        const long start = first_unmasked(m, length);
        for (long h = 0; h < kv_heads; ++h) {
            const long block = r * kv_heads + h;
            const KV_T *kk = k + block * cap * dim;
            const float *qq = q + block * groups * dim;
            float *s = scores + block * groups * length;
            switch (dim) {
            case 32: SCORES_BLOCK(32); break;
            case 64: SCORES_BLOCK(64); break;
            case 128: SCORES_BLOCK(128); break;
            default: SCORES_BLOCK(dim); break;
            }
        }
    }
}

void decode_values@S@(const float *p, const KV_T *v, const float *mask, float *out,
                   long r0, long r1, long kv_heads, long groups, long dim, long cap,
                   long length, long mask_stride) {
    for (long r = r0; r < r1; ++r) {
        const long start = first_unmasked(mask + r * mask_stride, length);
        for (long h = 0; h < kv_heads; ++h) {
            const long block = r * kv_heads + h;
            const KV_T *vv = v + block * cap * dim;
            const float *pp = p + block * groups * length;
            float *o = out + block * groups * dim;
            switch (dim) {
            case 32: VALUES_BLOCK(32); break;
            case 64: VALUES_BLOCK(64); break;
            case 128: VALUES_BLOCK(128); break;
            default: VALUES_BLOCK(dim); break;
            }
        }
    }
}
"""

_SOURCE = (
    _COMMON.replace("\n@FUNCTIONS@\n", "\n")
    + "#define KV_T float\n#define LD(x) (x)\n"
    + _FUNCTIONS.replace("@S@", "")
    + "#undef KV_T\n#undef LD\n#define KV_T unsigned short\n#define LD(x) bf16_to_float(x)\n"
    + _FUNCTIONS.replace("@S@", "_bf16")
)

# -fassociative-math (with the two flags it requires) lets the compiler vectorize the
# dot-product sums; unlike -ffast-math it keeps infinities (the mask's -inf) and NaNs.
_FLAGS = (
    "-O3",
    "-march=native",
    "-fno-math-errno",
    "-fassociative-math",
    "-fno-signed-zeros",
    "-fno-trapping-math",
    "-shared",
    "-fPIC",
)

_LONG, _FLOAT, _PTR = ctypes.c_long, ctypes.c_float, ctypes.c_void_p


def _cpu_key() -> str:
    """The CPU's model and flags (the library is built with -march=native)."""
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
        return "\n".join(
            sorted({line for line in lines if line.startswith(("model name", "flags"))})
        )
    except OSError:
        return platform.processor() or platform.machine()


def _cache_dir() -> Path:
    root = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(root) / "ragen" / "kernels"


def _build(compiler: str) -> Path:
    """Compile :data:`_SOURCE` (once per source, flags, compiler and CPU); its path."""
    key = hashlib.sha256("\0".join([_SOURCE, compiler, *_FLAGS, _cpu_key()]).encode())
    directory = _cache_dir()
    library = directory / f"decode_attention_{key.hexdigest()[:16]}.so"
    if library.exists():
        return library
    directory.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=directory) as tmp:
        source = Path(tmp) / "decode_attention.c"
        source.write_text(_SOURCE)
        built = Path(tmp) / library.name
        subprocess.run(
            [compiler, *_FLAGS, str(source), "-o", str(built)],
            check=True,
            capture_output=True,
            text=True,
            timeout=120,
        )
        os.replace(built, library)  # atomic: a concurrent builder's copy is as good
    return library


class DecodeAttention:
    """The loaded kernels; call it as :meth:`__call__` documents."""

    def __init__(self, library: ctypes.CDLL):
        self._functions = {}  # K/V element type -> (scores, values)
        for suffix in ("", "_bf16"):
            scores = getattr(library, f"decode_scores{suffix}")
            scores.argtypes = [_PTR] * 4 + [_LONG] * 8 + [_FLOAT]
            scores.restype = None
            values = getattr(library, f"decode_values{suffix}")
            values.argtypes = [_PTR] * 4 + [_LONG] * 8
            values.restype = None
            self._functions[suffix or "_fp32"] = (scores, values)
        self._pool = None
        self._pool_size = 0

    @staticmethod
    def supports(q, key_buffer, value_buffer, mask) -> bool:
        """Whether these tensors are what the loops read: on CPU, fp32 ``q`` and a 2-D
        additive fp32 mask with unit column stride, contiguous fp32 or bf16 buffers
        ``(b, H_kv, C, D)``."""
        import torch

        tensors = (q, key_buffer, value_buffer, mask)
        return (
            all(t.device.type == "cpu" for t in tensors)
            and q.dtype == mask.dtype == torch.float32
            and key_buffer.dtype == value_buffer.dtype
            and key_buffer.dtype in (torch.float32, torch.bfloat16)
            and key_buffer.is_contiguous()
            and value_buffer.is_contiguous()
            and key_buffer.shape == value_buffer.shape
            and mask.dim() == 2
            and mask.stride(1) == 1
        )

    def __call__(self, q, key_buffer, value_buffer, mask, length: int, scale: float):
        """``q`` (b, H, D) fp32; ``key_buffer``/``value_buffer`` (b, H_kv, C, D) contiguous,
        fp32 or bf16, with the first ``length`` positions filled; ``mask`` (b, >= length) additive
        (0 or -inf). Returns the attention output (b, H * D), heads in query order."""
        import torch

        b, heads, dim = q.shape
        kv_heads, cap = key_buffer.shape[1], key_buffer.shape[2]
        groups = heads // kv_heads
        q = q.contiguous()
        scores = torch.empty((b, heads, length), dtype=torch.float32)
        out = torch.empty((b, heads * dim), dtype=torch.float32)
        geometry = (kv_heads, groups, dim, cap, length)
        bf16 = key_buffer.dtype == torch.bfloat16
        scores_fn, values_fn = self._functions["_bf16" if bf16 else "_fp32"]

        def scores_rows(r0, r1):
            scores_fn(
                q.data_ptr(),
                key_buffer.data_ptr(),
                mask.data_ptr(),
                scores.data_ptr(),
                r0,
                r1,
                *geometry,
                mask.stride(0),
                scale,
            )

        def values_rows(r0, r1):
            values_fn(
                probs.data_ptr(),
                value_buffer.data_ptr(),
                mask.data_ptr(),
                out.data_ptr(),
                r0,
                r1,
                *geometry,
                mask.stride(0),
            )

        chunks = self._chunks(b)
        self._run(scores_rows, chunks)
        probs = torch.softmax(scores, dim=-1)
        self._run(values_rows, chunks)
        return out

    def _chunks(self, rows: int) -> list[tuple[int, int]]:
        import torch

        threads = max(1, min(torch.get_num_threads(), rows // 8))
        bounds = [rows * i // threads for i in range(threads + 1)]
        return list(zip(bounds[:-1], bounds[1:]))

    def _run(self, fn, chunks) -> None:
        if len(chunks) == 1:
            fn(*chunks[0])
            return
        if self._pool is None or self._pool_size < len(chunks):
            self._pool = ThreadPoolExecutor(len(chunks), thread_name_prefix="ragen-attn")
            self._pool_size = len(chunks)
        for future in [self._pool.submit(fn, *chunk) for chunk in chunks]:
            future.result()


@functools.cache
def decode_attention_kernel() -> DecodeAttention | None:
    """The built kernels, or None (logged once) when they cannot be built or loaded here."""
    compiler = os.environ.get("CC", "cc")
    try:
        return DecodeAttention(ctypes.CDLL(str(_build(compiler))))
    except (OSError, subprocess.SubprocessError) as exc:
        detail = getattr(exc, "stderr", None) or str(exc)
        log.warning(
            "the CPU decode-attention kernel could not be built with %r (%s); decoding "
            "with batched matmuls instead (set CC to a C compiler to enable it)",
            compiler,
            detail.strip().splitlines()[0] if detail.strip() else type(exc).__name__,
        )
        return None
