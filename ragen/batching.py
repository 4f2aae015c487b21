"""The typed batch of one update, for both trainers: trajectories padded into tensors
(:func:`collate`) and packed into token-budget micro-batches (:func:`micro_batches`).

The RL trainer (``ragen.trainer``) and SFT (``ragen.sft``) both train on a
:class:`TrainingBatch`; neither reaches into the other for it.

All per-token tensors are aligned to token positions of the training sequence:
``x[:, t]`` describes token ``input_ids[:, t]``. A log-prob at ``t`` is log p(token t |
tokens < t), so position 0 (always part of the first prompt) carries no log-prob.
Sequences are RIGHT-padded, which lets a micro-batch slice ``[:, :max_len]``.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, fields, replace
from typing import Any

import torch
from torch import Tensor

from ragen.agent.trajectory import Trajectory


@dataclass
class TrainingBatch:
    """The padded tensors of one update, declared up front.

    Every per-token tensor is ``(B, T)``, right-padded, aligned to token positions of the
    training sequence; per-sample tensors are ``(B,)``. :func:`collate` fills the fields
    read from trajectories; the trainer fills the rest phase by phase, in this order
    (a field is None until its phase ran, or when the configuration does not need it):

    =====================  ========  ================================================
    field                  phase     meaning
    =====================  ========  ================================================
    input_ids              collate   token ids (long), padded with the pad id
    attention_mask         collate   1 on real tokens (long)
    response_mask          collate   1 on sampled ids: the tokens trained on (M_loss)
    turn_end_mask          collate   1 on each turn's last sampled id
    gen_log_prob           collate   generation log-probs on sampled ids, 0 elsewhere
    lengths                collate   (B,) real tokens per row (long)
    index                  prepare   (B,) baseline group ids (long)
    token_level_scores     prepare   rewards placed on tokens, before any KL penalty
    bootstrap_mask         prepare   (B,) 1 where the return continues past the row
    advantage_mask         prepare   tokens the masked_gae recursion runs over (M_adv)
    old_log_prob           old-lp    log-probs of the training model before the update
    ref_log_prob           old-lp    reference-model log-probs (KL on only)
    old_entropy            old-lp    entropy of the model before the update (only with
                                     algo.pg_min_entropy > 0)
    values                 critic    V(prefix before token t), 0 off the response
    final_values           critic    (B,) V(the whole row): the bootstrap value
    token_level_rewards    adv       scores minus the in-reward KL penalty
    advantages, returns    adv       estimator outputs, 0 off the response
    images                 collate   per row, the pictures of its image ids (a list of
                                     (H, W, 3) uint8 arrays; None for text-only rows):
                                     not a tensor, turned into pixel inputs at each
                                     forward pass (``ragen.models.vlm.pixel_inputs``)
    =====================  ========  ================================================
    """

    input_ids: Tensor
    attention_mask: Tensor
    response_mask: Tensor
    turn_end_mask: Tensor
    gen_log_prob: Tensor
    lengths: Tensor
    index: Tensor | None = None
    token_level_scores: Tensor | None = None
    bootstrap_mask: Tensor | None = None
    advantage_mask: Tensor | None = None
    old_log_prob: Tensor | None = None
    ref_log_prob: Tensor | None = None
    old_entropy: Tensor | None = None
    values: Tensor | None = None
    final_values: Tensor | None = None
    token_level_rewards: Tensor | None = None
    advantages: Tensor | None = None
    returns: Tensor | None = None
    images: list[list] | None = None

    @property
    def size(self) -> int:
        """B, the number of rows."""
        return int(self.input_ids.shape[0])

    def _tensors(self) -> Iterator[tuple[str, Tensor]]:
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, Tensor):
                yield f.name, value

    def to(self, device: torch.device | str) -> TrainingBatch:
        """A copy with every tensor on ``device``."""
        return replace(self, **{k: v.to(device) for k, v in self._tensors()})

    def rows(self, index: Sequence[int]) -> TrainingBatch:
        """Rows ``index`` of every tensor, per-token ones cut to the longest of those rows
        (right padding makes ``[:, :L]`` lossless)."""
        idx = torch.as_tensor(list(index), dtype=torch.long, device=self.lengths.device)
        length = int(self.lengths[idx].max())
        images = None if self.images is None else [self.images[i] for i in idx.tolist()]
        return replace(
            self,
            images=images,
            **{k: v[idx, :length] if v.dim() == 2 else v[idx] for k, v in self._tensors()},
        )


def collate(trajectories: Sequence[Trajectory], pad_id: int) -> TrainingBatch:
    """Pad a list of trajectories into a :class:`TrainingBatch` (B = len(trajectories),
    T = the longest sequence); only the ``collate`` fields are set."""
    if not trajectories:
        raise ValueError("collate() got no trajectories")
    lengths = [len(t.input_ids) for t in trajectories]
    B, T = len(trajectories), max(lengths)
    input_ids = torch.full((B, T), pad_id, dtype=torch.long)
    attention_mask = torch.zeros(B, T, dtype=torch.long)
    response_mask = torch.zeros(B, T)
    turn_end_mask = torch.zeros(B, T)
    gen_log_prob = torch.zeros(B, T)
    for i, traj in enumerate(trajectories):
        n = lengths[i]
        input_ids[i, :n] = torch.tensor(traj.input_ids, dtype=torch.long)
        attention_mask[i, :n] = 1
        response_mask[i, :n] = torch.tensor(traj.response_mask, dtype=torch.float)
        gen_log_prob[i, :n] = torch.tensor(traj.gen_logprobs, dtype=torch.float)
        if traj.turn_ends:
            turn_end_mask[i, torch.tensor(traj.turn_ends, dtype=torch.long)] = 1.0
    return TrainingBatch(
        input_ids=input_ids,
        attention_mask=attention_mask,
        response_mask=response_mask,
        turn_end_mask=turn_end_mask,
        gen_log_prob=gen_log_prob,
        lengths=torch.tensor(lengths, dtype=torch.long),
        images=[list(t.images) for t in trajectories]
        if any(t.images for t in trajectories)
        else None,
    )


def micro_batches(
    batch: TrainingBatch,
    rows: Sequence[int],
    token_budget: int,
    min_fill: float = 0.0,
    by_prompt: bool = False,
) -> list[tuple[list[int], TrainingBatch]]:
    """Split ``rows`` of ``batch`` into token-budget micro-batches (RL and SFT alike).

    Returns ``(row_ids, micro)`` pairs: ``micro = batch.rows(row_ids)``, padded to its own
    longest row, costing at most ``token_budget`` padded tokens unless a single row is
    longer (:func:`token_budget_micro_batches`, which ``min_fill`` is passed to). Every
    row appears exactly once.

    ``by_prompt``: rows that share a prompt (:func:`prompt_keys`) are packed next to each
    other, so that the forward pass runs each distinct prompt, and each distinct row,
    once per micro-batch (``ragen.models.logprobs``, "Identical rows and identical
    prompts") instead of once per micro-batch it was scattered over. A minibatch's loss
    is a sum over its micro-batches, so which rows share one changes the gradient only by
    float rounding. Measured on FrozenLake at 1,024 episodes per step: 3,877 rows from
    1,406 distinct prompts, computed as 3,077 prompts when the rows came in shuffled.
    """
    rows = list(rows)
    lengths = batch.lengths.tolist()
    keys = prompt_keys(batch, rows) if by_prompt else None
    packs = token_budget_micro_batches([lengths[i] for i in rows], token_budget, min_fill, keys)
    out = []
    for pack in packs:
        ids = [rows[j] for j in pack]
        out.append((ids, batch.rows(ids)))
    return out


def prompt_keys(batch: TrainingBatch, rows: Sequence[int]) -> list[tuple[int, ...]]:
    """Each row's prompt: its ids before its first response token (the whole row when it
    has none), one tuple per row of ``rows``."""
    idx = torch.as_tensor(list(rows), dtype=torch.long, device=batch.input_ids.device)
    response = batch.response_mask[idx].bool()
    first = torch.where(response.any(-1), response.long().argmax(-1), batch.lengths[idx])
    ids = batch.input_ids[idx].tolist()
    return [tuple(r[:n]) for r, n in zip(ids, first.tolist())]


def token_budget_micro_batches(
    lengths: Sequence[int],
    token_budget: int,
    min_fill: float = 0.0,
    keys: Sequence[Any] | None = None,
) -> list[list[int]]:
    """Pack sample indices into micro-batches whose PADDED size stays within a budget.

    Samples are sorted by length (longest first) and packed greedily: a micro-batch of
    n samples padded to its longest member costs ``n * max_len`` tokens. Sorting keeps
    lengths inside a micro-batch close, so padding waste stays small. A sample longer
    than the budget gets a micro-batch of its own.

    ``min_fill`` in [0, 1): a sample shorter than ``min_fill * max_len`` of the current
    micro-batch starts a new one even within the budget, so a batch of two length modes
    (SFT's 110-token moves beside 170-token auxiliary replies) is not padded to the longer
    mode throughout (0: fill up to the budget).

    ``keys``: one comparable key per sample; samples with equal keys are kept next to
    each other (their group ordered by its longest sample, longest first, then by key),
    so a group is split over two micro-batches only at a budget boundary.
    """
    if not 0.0 <= min_fill < 1.0:
        raise ValueError(f"min_fill must be in [0, 1), got {min_fill}")
    if keys is None:
        order = sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))
    else:
        longest_of: dict[Any, int] = {}
        for key, n in zip(keys, lengths):
            longest_of[key] = max(longest_of.get(key, 0), n)
        order = sorted(
            range(len(lengths)), key=lambda i: (-longest_of[keys[i]], keys[i], -lengths[i], i)
        )
    batches: list[list[int]] = []
    current: list[int] = []
    current_max = 0
    for i in order:
        longest = max(current_max, lengths[i])
        too_short = lengths[i] < min_fill * current_max
        if current and (too_short or longest * (len(current) + 1) > token_budget):
            batches.append(current)
            current, longest = [], lengths[i]
        current.append(i)
        current_max = longest
    if current:
        batches.append(current)
    return batches


def padding_fraction(lengths: Sequence[int], batches: Sequence[Sequence[int]]) -> float:
    """Fraction of computed (padded) token slots that are padding."""
    real = sum(lengths[i] for b in batches for i in b)
    padded = sum(max(lengths[i] for i in b) * len(b) for b in batches if b)
    return 0.0 if padded == 0 else 1.0 - real / padded
