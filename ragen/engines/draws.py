"""Where a generate call's random numbers come from: one generator for the batch, or one
stream per row.

The token engines sample by inverse CDF with one uniform ``u`` per row and decode step
(``ragen.engines.hf.sample_next_token``). Two sources:

* ``SamplingParams.seed``: one ``torch.Generator`` for the call; row ``i`` of step ``k``
  gets the ``i``-th number of the ``k``-th draw. What a row samples then depends on
  which other rows share its call, and in what order;
* ``SamplingParams.row_seeds``: one stream per row, counter-based: row ``i``'s ``k``-th
  token uses ``u = uniform(row_seeds[i], k)``, a pure function of the two numbers. A row
  samples the same ids whether it is generated alone, in a batch of 128, first or last,
  in this process or on a rollout worker (the rollout gives each episode's turn its own
  seed, ``ragen.agent.rollout``), so splitting episodes over calls or workers changes
  nothing but float rounding: a draw within ~1e-7 of a CDF boundary can still flip
  when the batch changes the kernels' rounding.

The per-row stream is SplitMix64 (Steele, Lea, Flood 2014: a Weyl sequence through a
64-bit mixing function): state ``mix(seed) + (k + 1) * golden``, output ``mix(state)``;
the top 24 bits make a float32 in ``[0, 1)`` exactly (never 1.0, which the inverse CDF
would map past the last token). Vectorized in numpy's wrapping uint64 arithmetic.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)


def _mix(z: np.ndarray) -> np.ndarray:
    """SplitMix64's finalizer on uint64 ``z`` (wrapping arithmetic)."""
    z = (z ^ (z >> np.uint64(30))) * _MIX1
    z = (z ^ (z >> np.uint64(27))) * _MIX2
    return z ^ (z >> np.uint64(31))


def row_uniforms(seeds: Sequence[int] | np.ndarray, step: int) -> np.ndarray:
    """``(n,)`` float32 uniforms in ``[0, 1)``: the ``step``-th number of each seed's stream."""
    s = np.asarray(seeds, dtype=np.uint64)
    with np.errstate(over="ignore"):
        state = _mix(s + _GOLDEN) + np.uint64(step + 1) * _GOLDEN
        bits = _mix(state) >> np.uint64(40)  # 24 bits: exact in float32
    return bits.astype(np.float32) * np.float32(2.0**-24)


class Draws:
    """The uniforms of one generate call: ``uniform(rows, step)`` gives the ``(b,)``
    tensor for the batch rows still running (``rows``: their original indices), or None
    when nothing is drawn (greedy decoding; no seed at all, where torch's global RNG
    draws inside ``sample_next_token``)."""

    def __init__(self, params: Any, batch: int, device: Any):
        import torch

        self.device = device
        self.greedy = params.temperature == 0
        self.generator = None
        self.seeds = None
        row_seeds = getattr(params, "row_seeds", None)
        if row_seeds is not None:
            if len(row_seeds) != batch:
                raise ValueError(f"row_seeds has {len(row_seeds)} seeds for {batch} prompts")
            self.seeds = np.asarray([int(s) % (1 << 64) for s in row_seeds], dtype=np.uint64)
        elif params.seed is not None:
            self.generator = torch.Generator(device=device).manual_seed(int(params.seed))

    def uniform(self, rows: Sequence[int], step: int):
        import torch

        if self.greedy:
            return None
        if self.seeds is not None:
            if hasattr(rows, "cpu"):  # a tensor of row indices (the engine's running rows)
                rows = rows.cpu().numpy()
            u = row_uniforms(self.seeds[np.asarray(rows, dtype=np.int64)], step)
            return torch.from_numpy(u).to(self.device)
        if self.generator is not None:
            # the same draw sample_next_token made from the call's generator before
            return torch.rand(len(rows), generator=self.generator, device=self.device)
        return None
