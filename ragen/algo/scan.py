"""Vectorized machinery behind the GAE family: packing and discounted reverse scans.

Every GAE variant is the backward recursion A_j = x_j + c * A_{j+1} run over the
*response tokens only*, with observation tokens skipped. Two tricks make it fast for a
whole batch at once, with no Python loop over samples, turns or positions:

1. **Packing.** Response tokens are moved to the left of a dense grid with one scatter
   (``pack``), so the skipped positions vanish and "the next response token" is simply
   the next column; results are moved back with one gather (``unpack``). For the
   turn-aware estimators each turn gets its own row, ``(B, K + 1, Lt)``, so the
   token-level recursion never crosses a turn boundary.
2. **Blocked scan.** A_j = sum_{k >= j} c^{k-j} x_k is computed exactly by blocks of
   ``block_size`` positions: inside a block it is one matmul with the triangular matrix
   W[k, i] = c^{k-i} (k >= i, else 0); the value at each block start is then carried to
   the previous block by the same recursion on the (much shorter) sequence of block
   starts with discount c^block_size. Only non-negative powers of c <= 1 appear, so it is
   numerically stable (unlike scaling by c^{-t}). For c = 1 it is a plain reverse cumsum.

Memory traffic, not arithmetic, is the cost on CPU, so the code keeps full-size
temporaries few: int32 counters, in-place updates of its own temporaries, packed widths
rounded up to whole blocks (no padding copies) and a trash cell instead of masks.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

__all__ = [
    "Packing",
    "TurnGrid",
    "pack_by_mask",
    "turn_grid",
    "discounted_reverse_cumsum",
    "shift_left",
]


BLOCK_SIZE = 64  # scan block; packed widths are rounded up to it so the scan needs no padding


def _round_up(n: int, multiple: int) -> int:
    return n if n <= multiple else -(-n // multiple) * multiple


@dataclass(frozen=True)
class Packing:
    """A scatter plan moving selected positions of a ``(B, T)`` tensor into a ``(B, width)`` grid.

    ``dest[b, t]`` is the grid cell of position t. Unselected positions all go to one
    *trash* cell, ``trash``, which ``pack`` zeroes afterwards; every cell that holds no
    selected position reads 0, so trailing zeros act as harmless padding for the scans.
    ``valid`` ``(B, width)`` marks the cells that hold a selected position.
    """

    dest: Tensor  # (B, T) int64
    valid: Tensor  # (B, width) bool
    width: int
    trash: int

    def pack(self, x: Tensor) -> Tensor:
        """``(B, T) -> (B, width)``; empty cells are 0."""
        out = torch.zeros(x.shape[0], self.width, dtype=x.dtype, device=x.device)
        out.scatter_(1, self.dest, x)  # unselected positions all land on the trash cell...
        out[:, self.trash] = 0  # ...which is reset (it is never a valid cell)
        return out

    def unpack(self, y: Tensor) -> Tensor:
        """``(B, width) -> (B, T)``; unselected positions read the trash cell, i.e. get 0.

        ``y`` must be 0 at the trash cell (true for anything computed from packed inputs
        by the GAE code, where empty cells stay 0).
        """
        return y.gather(1, self.dest)


def pack_by_mask(mask: Tensor) -> Packing:
    """Packing of the ``mask`` positions of each row to the left, keeping their order.

    Shapes: mask ``(B, T)`` bool -> Packing with width >= L + 1, L = max_b sum_t mask[b, t]
    (one trash column, rounded up to a multiple of ``BLOCK_SIZE``).
    Example: mask [0 1 1 0 1] -> dest [3 0 1 3 2], width 4, trash 3.
    """
    count = torch.cumsum(mask, 1, dtype=torch.int32)  # int32: half the memory traffic
    total = count[:, -1:].clone() if mask.shape[1] else count.new_zeros(mask.shape[0], 1)
    max_count = int(total.max()) if total.numel() else 0
    width = _round_up(max_count + 1, BLOCK_SIZE)
    dest = count.sub_(1).masked_fill_(~mask, max_count).long()  # scatter/gather want int64
    valid = torch.arange(width, device=mask.device) < total
    return Packing(dest=dest, valid=valid, width=width, trash=max_count)


@dataclass(frozen=True)
class TurnGrid:
    """Response tokens laid out one turn per row: ``packing`` fills a ``(B, (K + 1) * Lt)``
    grid, viewable as ``(B, K + 1, Lt)``, with token j of turn k in cell (k, j).

    Row K is always empty (it holds the trash cell), which also supplies the V_K = 0 and
    A_K = 0 that the turn recursion starts from. ``lengths`` ``(B, K + 1)`` holds each
    turn's number of tokens (0 for turns a row lacks); the turn-end token of turn k sits
    in cell (k, lengths[k] - 1).
    """

    packing: Packing
    num_turns: int  # K, the most turns in any row
    turn_len: int  # Lt >= the longest turn (rounded up to whole scan blocks)
    lengths: Tensor  # (B, K + 1) int64
    turn_id: Tensor  # (B, T) int64: turn of each response token (turn ends before it)

    def view(self, packed: Tensor) -> Tensor:
        """``(B, (K + 1) * Lt) -> (B, K + 1, Lt)``."""
        return packed.view(packed.shape[0], self.num_turns + 1, self.turn_len)


def turn_grid(response_mask: Tensor, turn_end_mask: Tensor) -> TurnGrid:
    """Lay out response tokens one turn per row (see ``TurnGrid``).

    A turn is the run of response tokens after the previous turn end up to and including
    its own turn end. Response tokens after the last marked turn end form a final turn
    that ends at the row's last response token (so a missing last marker, e.g. for a
    truncated generation, is closed implicitly). ``turn_end_mask`` must lie inside
    ``response_mask`` (both ``(B, T)`` bool); markers outside it are ignored here.
    """
    mask = response_mask
    batch, device = mask.shape[0], mask.device
    count = torch.cumsum(mask, 1, dtype=torch.int32)  # response tokens up to and including t
    ends = (turn_end_mask & mask) | (mask & (count == count[:, -1:]))  # + implicit final end
    # Integer arithmetic in int32 (same-dtype in-place ops are the fast ones); int64 only
    # where gather/scatter insist on it.
    end_count = torch.cumsum(ends, 1, dtype=torch.int32)
    num_turns = int(end_count[:, -1].max()) if mask.numel() else 0
    turn_id = end_count.sub_(ends.to(torch.int32)).long()  # turn ends strictly before t
    # Response count at the end of turn k = the largest count among positions of turn k
    # (later positions belong to later turns). Column K gathers what follows the last
    # end; it is reset so that row K of the grid is empty.
    count_at_end = torch.zeros(batch, num_turns + 1, dtype=torch.int32, device=device)
    count_at_end.scatter_reduce_(1, turn_id, count, reduce="amax")
    count_at_end[:, num_turns] = 0
    count_at_end = count_at_end.long()
    count_before = F.pad(count_at_end[:, :-1], (1, 0))  # count at the previous turn's end
    lengths = (count_at_end - count_before).clamp_min_(0)  # 0 for turns the row lacks
    # Rounded up to whole scan blocks, so the token-level scan needs no padding copies.
    turn_len = _round_up(max(int(lengths.max()) if lengths.numel() else 0, 1), BLOCK_SIZE)
    trash = num_turns * turn_len  # first cell of the always-empty row K
    # Cell of token t: turn_id * Lt + (count - 1 - count_before[turn_id]).
    row_start = (torch.arange(num_turns + 1, device=device) * turn_len - count_before).int()
    dest = row_start.gather(1, turn_id).add_(count).sub_(1).masked_fill_(~mask, trash).long()
    j = torch.arange(turn_len, device=device)
    valid = (j < lengths.unsqueeze(-1)).reshape(batch, -1)
    packing = Packing(dest=dest, valid=valid, width=(num_turns + 1) * turn_len, trash=trash)
    return TurnGrid(packing, num_turns, turn_len, lengths, turn_id)


def shift_left(x: Tensor) -> Tensor:
    """x_{j+1} along the last dim, with 0 past the end: ``(..., L) -> (..., L)``."""
    return F.pad(x[..., 1:], (0, 1))


def _decay_matrix(c: float, n: int, dtype: torch.dtype, device: torch.device) -> Tensor:
    """W[k, i] = c^(k - i) for k >= i else 0, ``(n, n)``; powers computed in float64."""
    k = torch.arange(n, dtype=torch.float64, device=device)
    exponent = k[:, None] - k[None, :]
    w = torch.where(exponent >= 0, torch.pow(c, exponent.clamp_min(0)), 0.0)
    return w.to(dtype)


def discounted_reverse_cumsum(x: Tensor, discount: float, block_size: int = BLOCK_SIZE) -> Tensor:
    """A_j = sum_{k >= j} discount^(k - j) x_k along the last dim (i.e. A_j = x_j + c A_{j+1}).

    Exact blocked scan (see module docstring); ``0 <= discount <= 1``.
    Shapes: ``(..., L) -> (..., L)``, same dtype as ``x``.
    """
    c = float(discount)
    if not 0.0 <= c <= 1.0:
        raise ValueError(f"discount must be in [0, 1], got {discount!r}")
    if block_size < 2:
        raise ValueError(f"block_size must be >= 2, got {block_size}")
    length = x.shape[-1]
    if length == 0 or x.numel() == 0:
        return x.clone()
    if c == 1.0:
        return x.flip(-1).cumsum(-1).flip(-1)
    if c == 0.0:
        return x.clone()
    lead = x.shape[:-1]
    rows = x.reshape(-1, length)
    if length <= block_size:
        return (rows @ _decay_matrix(c, length, x.dtype, x.device)).reshape(*lead, length)
    num_blocks = math.ceil(length / block_size)
    if num_blocks * block_size != length:  # zeros on the right change no earlier A_j
        rows = F.pad(rows, (0, num_blocks * block_size - length))
    blocks = rows.reshape(-1, num_blocks, block_size)
    local = blocks @ _decay_matrix(c, block_size, x.dtype, x.device)  # scan inside each block
    # A at each block start obeys the same recursion over blocks with discount c^block_size.
    block_start = discounted_reverse_cumsum(local[..., 0], c**block_size, block_size)
    next_start = F.pad(block_start[:, 1:], (0, 1))  # A at the start of block b+1 (0 after last)
    i = torch.arange(block_size, dtype=torch.float64, device=x.device)
    carry_decay = torch.pow(c, block_size - i).to(x.dtype)
    local.addcmul_(next_start.unsqueeze(-1), carry_decay)  # + c^(bs - i) * A_{next block start}
    return local.view(rows.shape[0], -1)[:, :length].reshape(*lead, length)
