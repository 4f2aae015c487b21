"""How work is split: env groups over rollout workers, minibatch rows over ranks.

Both splits are pure functions of their inputs, so every process computes the same one
without talking to the others.
"""

from __future__ import annotations

from collections.abc import Sequence

from ragen.errors import ConfigError

#: ``trainer.train_sharding`` values: every rank a full replica, or FSDP2 shards
TRAIN_SHARDINGS = ("replicate", "fsdp")


def shard_groups(n_groups: int, n_workers: int) -> list[list[int]]:
    """Contiguous, near-equal shards of the group indices ``0 .. n_groups-1``, one per
    worker (the first ``n_groups % n_workers`` shards hold one more; a shard may be empty
    when there are more workers than groups)."""
    if n_workers < 1:
        raise ConfigError(f"n_workers must be >= 1, got {n_workers}")
    base, extra = divmod(int(n_groups), int(n_workers))
    shards, start = [], 0
    for w in range(n_workers):
        size = base + (1 if w < extra else 0)
        shards.append(list(range(start, start + size)))
        start += size
    return shards


def split_rows(rows: Sequence[int], lengths: Sequence[int], world: int) -> list[list[int]]:
    """Rows of one minibatch dealt to ``world`` ranks, balanced by tokens.

    Longest row first, each to the rank with the fewest tokens so far (ties: the lower
    rank); each rank's rows keep the minibatch order. ``lengths[r]``: row r's length.
    Deterministic, so every rank computes the same split from the same batch.
    """
    load = [0] * world
    owner: dict[int, int] = {}
    for row in sorted(rows, key=lambda r: (-int(lengths[r]), r)):
        rank = min(range(world), key=lambda k: (load[k], k))
        owner[row] = rank
        load[rank] += int(lengths[row])
    return [[r for r in rows if owner[r] == k] for k in range(world)]
