"""The packing and blocked-scan machinery behind the GAE family."""

from __future__ import annotations

import pytest
import torch

from ragen.algo.scan import discounted_reverse_cumsum, pack_by_mask, turn_grid


def loop_discounted_reverse_cumsum(x: torch.Tensor, c: float) -> torch.Tensor:
    out = torch.zeros_like(x)
    running = torch.zeros(x.shape[:-1], dtype=x.dtype)
    for j in reversed(range(x.shape[-1])):
        running = x[..., j] + c * running
        out[..., j] = running
    return out


def test_discounted_reverse_cumsum_hand_example():
    # A_2 = 4; A_1 = 2 + 0.5*4 = 4; A_0 = 1 + 0.5*4 = 3
    x = torch.tensor([[1.0, 2.0, 4.0]])
    torch.testing.assert_close(discounted_reverse_cumsum(x, 0.5), torch.tensor([[3.0, 4.0, 4.0]]))
    torch.testing.assert_close(discounted_reverse_cumsum(x, 1.0), torch.tensor([[7.0, 6.0, 4.0]]))
    torch.testing.assert_close(discounted_reverse_cumsum(x, 0.0), x)


@pytest.mark.parametrize("c", [0.0, 0.3, 0.95, 0.999, 1.0])
@pytest.mark.parametrize(
    "length,block", [(1, 64), (5, 4), (64, 64), (65, 64), (300, 8), (1000, 16)]
)
def test_discounted_reverse_cumsum_matches_loop(c, length, block):
    gen = torch.Generator().manual_seed(length)
    x = torch.randn(3, 2, length, generator=gen, dtype=torch.float64)
    got = discounted_reverse_cumsum(x, c, block_size=block)
    torch.testing.assert_close(got, loop_discounted_reverse_cumsum(x, c))


def test_discounted_reverse_cumsum_float32_stays_accurate_on_long_rows():
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(4, 4096, generator=gen, dtype=torch.float64)
    expected = loop_discounted_reverse_cumsum(x, 0.999)
    got = discounted_reverse_cumsum(x.float(), 0.999)
    torch.testing.assert_close(got.double(), expected, rtol=1e-4, atol=1e-4)


def test_discounted_reverse_cumsum_rejects_bad_discount():
    with pytest.raises(ValueError, match="discount"):
        discounted_reverse_cumsum(torch.zeros(1, 3), 1.2)


def test_pack_by_mask_round_trip():
    mask = torch.tensor([[0, 1, 1, 0, 1], [1, 0, 0, 0, 0]], dtype=torch.bool)
    x = torch.arange(10.0).view(2, 5)
    packing = pack_by_mask(mask)
    assert (packing.width, packing.trash) == (4, 3)  # 3 tokens + an always-empty trash column
    assert packing.dest.tolist() == [[3, 0, 1, 3, 2], [0, 3, 3, 3, 3]]
    torch.testing.assert_close(
        packing.pack(x), torch.tensor([[1.0, 2.0, 4.0, 0.0], [5.0, 0.0, 0.0, 0.0]])
    )
    assert packing.valid.tolist() == [[True, True, True, False], [True, False, False, False]]
    torch.testing.assert_close(packing.unpack(packing.pack(x)), x * mask)


def test_turn_grid_layout():
    # Row 0: turns {1,2} (end 2) and {4} (implicitly closed). Row 1: one turn {0,1,2}.
    mask = torch.tensor([[0, 1, 1, 0, 1], [1, 1, 1, 0, 0]], dtype=torch.bool)
    ends = torch.tensor([[0, 0, 1, 0, 0], [0, 0, 0, 0, 0]], dtype=torch.bool)
    grid = turn_grid(mask, ends)
    assert (grid.num_turns, grid.turn_len) == (2, 3)
    assert grid.lengths.tolist() == [[2, 1, 0], [3, 0, 0]]  # row K = 2 is always empty
    x = torch.arange(1.0, 11.0).view(2, 5)
    grid_x = grid.view(grid.packing.pack(x))
    assert grid_x[:, :2].tolist() == [
        [[2.0, 3.0, 0.0], [5.0, 0.0, 0.0]],
        [[6.0, 7.0, 8.0], [0.0, 0.0, 0.0]],
    ]
    assert (grid_x[:, 2] == 0).all()
    torch.testing.assert_close(grid.packing.unpack(grid.packing.pack(x)), x * mask)


def test_turn_grid_without_response_tokens():
    grid = turn_grid(torch.zeros(2, 4, dtype=torch.bool), torch.zeros(2, 4, dtype=torch.bool))
    assert (grid.num_turns, grid.packing.width) == (0, 1)  # just the trash cell
    assert grid.packing.unpack(grid.packing.pack(torch.ones(2, 4))).eq(0).all()
