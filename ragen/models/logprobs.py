"""Per-token log-probs of given ids under a causal LM: the quantity generation reports.

``Generation.logprobs`` (``ragen.engines``) and the trainer's recomputation must agree,
so both use this definition::

    logp[b, t] = log_softmax(logits[b, t-1] / T)[input_ids[b, t]]      (T = 0 -> T = 1)

i.e. the temperature-scaled distribution BEFORE any top-p / top-k truncation.

Only the positions that matter need the LM head. RL and SFT losses read log-probs of
the response tokens alone (a quarter to a half of a multi-turn sequence), and the head
(``hidden x vocab``) plus the softmax over the vocabulary are a large share of a small
model's forward pass. ``sequence_logprobs(..., positions=mask)`` therefore runs the
backbone on the whole sequence and the head only on the hidden states that predict a
wanted token. That is exact for architectures whose logits are a plain
``lm_head(final_hidden)`` (the ``PLAIN_HEAD_MODEL_TYPES`` below); any other model goes
through the full forward pass, with the same result.

Shared prompt prefix: the rows of a batch often start with the same ids (the system
prompt and instructions: 55-76 of a ~115-id grid prompt with the demo's one state per
turn). When every row's first ``n >= MIN_SHARED_PREFIX`` ids are identical and real,
and no wanted token is predicted inside them, the backbone runs those ``n`` columns
ONCE (one row, with gradients), hands their K/V to the other rows as a cache and runs
only the remaining columns for every row. Autograd sums each row's gradient through
the shared K/V, so losses and gradients equal the full forward's within float
rounding (``tests/test_models_logprobs.py``). Batches must be right-padded (the trainer's
and SFT's are) for a shared prefix to be found. Skipped: under gradient checkpointing
(transformers turns the cache off there) and where dropout is active in training (one
row's dropout draw would stand for all rows).

Identical rows and identical prompts: a group's episodes often play the same turn in
the same state (the demo's FrozenLake at 64 x 16 episodes: 1,141 training rows from 424
distinct prompts, 766 distinct rows). With ``positions`` given:

* rows identical in ids, mask and wanted positions are computed ONCE and their outputs
  gathered back to every copy (:func:`duplicate_rows`); autograd sums the copies'
  gradients through the gather: the chain rule, so losses and gradients equal the
  full forward's within float rounding;
* the rows left are grouped by their prompt, the ids between the shared prefix and
  the row's first wanted token: each distinct prompt runs once, its K/V reach its rows
  as a cache and only the rows' own columns run per row; the hidden states come back
  in the rows' own layout (:func:`grouped_hidden`). Used when it saves at least
  :data:`MIN_SAVED_SHARE` of the rows' prompts (else the plain path).

``dedupe=False`` turns both off.
"""

from __future__ import annotations

from .kv_cache import cache_arg, returned_cache

#: model types whose logits are exactly ``lm_head(last_hidden_state)`` (no soft-capping,
#: logit scaling or hidden-state rescaling before the head)
PLAIN_HEAD_MODEL_TYPES = frozenset(
    {"qwen2", "qwen2_moe", "qwen3", "qwen3_moe", "llama", "mistral", "mixtral", "phi3"}
)


#: leading ids all rows must share before the prefix is run once (shorter: not worth it)
MIN_SHARED_PREFIX = 16


def shared_prefix_length(input_ids, attention_mask, positions) -> int:
    """Columns ``[0, n)`` that every row has real and identical, with no wanted token
    predicted from them: ``n <= t - 1`` for the first column ``t`` of ``positions``
    (its predictor, column ``t - 1``, must be computed per row). 0 for one row."""
    if input_ids.shape[0] < 2:
        return 0
    same = (input_ids == input_ids[:1]).all(0) & attention_mask.bool().all(0)  # (T,)
    n = int(same.long().cumprod(0).sum())
    wanted = positions.bool().any(0).nonzero()
    if len(wanted):
        n = min(n, int(wanted[0]) - 1)
    return max(0, min(n, input_ids.shape[1] - 1))


def shared_prefix_columns(
    backbone, input_ids, attention_mask, positions, limit: int | None = None
) -> int:
    """The prefix length to run once (0: none): :func:`shared_prefix_length`, at most
    ``limit``, when that is at least :data:`MIN_SHARED_PREFIX` and the backbone keeps a
    cache."""
    if not prefix_sharing_allowed(backbone):
        return 0
    shared = shared_prefix_length(input_ids, attention_mask, positions)
    shared = shared if limit is None else min(shared, limit)
    return shared if shared >= MIN_SHARED_PREFIX else 0


#: least share of a micro-batch's rows (or prompts) that identical copies must make up
#: before they are computed once (fewer: the gathers cost more than they save)
MIN_SAVED_SHARE = 0.1


def duplicate_rows(input_ids, attention_mask, positions):
    """``(first, inverse)`` when at least :data:`MIN_SAVED_SHARE` of the rows are copies
    of another row (same ids, mask and wanted positions), else None: ``first`` (U,) the
    distinct rows, ``inverse`` (B,) the index into them of every row."""
    import torch

    n = input_ids.shape[0]
    if n < 2:
        return None
    key = torch.cat([input_ids, attention_mask.long(), positions.long()], dim=1)
    distinct, inverse = torch.unique(key, dim=0, return_inverse=True)
    if distinct.shape[0] > (1 - MIN_SAVED_SHARE) * n:
        return None
    first = torch.full((distinct.shape[0],), n, dtype=torch.long, device=input_ids.device)
    first.scatter_reduce_(0, inverse, torch.arange(n, device=input_ids.device), "amin")
    return first, inverse


def prompt_groups(input_ids, attention_mask, positions, shared: int):
    """Rows grouped by their prompt: the ids in columns ``[shared, split_r)`` with
    ``split_r`` the row's first wanted column (its length when none is wanted).

    Returns ``(split (B,), members (D,), inverse (B,))`` (``members``: one row of each
    distinct prompt; ``inverse``: each row's prompt) when the distinct prompts are at
    most ``1 - MIN_SAVED_SHARE`` of the rows, else None."""
    import torch

    n = input_ids.shape[0]
    if n < 2:
        return None
    lengths = attention_mask.sum(-1)
    wanted = positions.bool() & attention_mask.bool()
    has = wanted.any(-1)
    split = torch.where(has, wanted.long().argmax(-1), lengths).clamp(min=shared)
    split_list = split.tolist()
    ids = input_ids.tolist()
    first: dict[tuple, int] = {}
    members, inverse = [], []
    for r in range(n):
        key = (split_list[r], *ids[r][shared : split_list[r]])
        j = first.get(key)
        if j is None:
            j = first[key] = len(members)
            members.append(r)
        inverse.append(j)
    if len(members) > (1 - MIN_SAVED_SHARE) * n:
        return None
    device = input_ids.device
    return (
        split,
        torch.tensor(members, dtype=torch.long, device=device),
        torch.tensor(inverse, dtype=torch.long, device=device),
    )


def _right_aligned_block(input_ids, starts, ends, pad_id: int):
    """Rows' columns ``[starts_r, ends_r)`` moved to the left of a ``(n, W)`` block,
    ``W = max(ends - starts)``; returns ``(ids, mask, source)`` with ``source[r, j] =
    starts_r + j`` (clamped into the row) for gathers."""
    import torch

    width = max(int((ends - starts).max()), 1)
    cols = torch.arange(width, device=input_ids.device)[None]
    source = starts[:, None] + cols
    mask = source < ends[:, None]
    source = source.clamp(max=input_ids.shape[1] - 1)
    ids = input_ids.gather(1, source).masked_fill(~mask, pad_id)
    return ids, mask.long(), source


def grouped_hidden(backbone, input_ids, attention_mask, position_ids, shared: int, groups):
    """``last_hidden_state`` of columns ``[shared, T)`` (B, T - shared, H) computed by
    prompt groups (module doc): the shared prefix once (one row), each distinct prompt
    once (``groups`` from :func:`prompt_groups`), then every row's own columns with the
    prefix's and its prompt's K/V as a cache. Hidden states come back in the rows' own
    layout. Right-padded batches only."""
    import torch

    split, members, inverse = groups
    n = input_ids.shape[0]
    device = input_ids.device
    lengths = attention_mask.sum(-1)
    # level 1: the prefix every row shares, once, as a cache for the distinct prompts
    cache = None
    if shared:
        cache = returned_cache(
            backbone(
                input_ids=input_ids[:1, :shared],
                attention_mask=attention_mask[:1, :shared],
                position_ids=position_ids[:1, :shared],
                use_cache=True,
            )
        )
        cache.batch_repeat_interleave(len(members))
    # level 2: each distinct prompt, right-padded into a (D, P) block
    start = torch.full_like(members, shared)
    p_ids, p_mask, p_src = _right_aligned_block(input_ids[members], start, split[members], pad_id=0)
    prompt_width = p_ids.shape[1]
    ones = attention_mask.new_ones((len(members), shared))
    out2 = backbone(
        input_ids=p_ids,
        attention_mask=torch.cat([ones, p_mask], dim=1),
        position_ids=position_ids[members].gather(1, p_src),
        **cache_arg(backbone, cache),
        use_cache=True,
    )
    cache = returned_cache(out2)
    cache.batch_select_indices(inverse)  # (D, ...) -> (B, ...), differentiable
    # level 3: every row's own columns after its prompt
    r_ids, r_mask, r_src = _right_aligned_block(input_ids, split, lengths, pad_id=0)
    mask = torch.cat([attention_mask.new_ones((n, shared)), p_mask[inverse], r_mask], dim=1)
    out3 = backbone(
        input_ids=r_ids,
        attention_mask=mask,
        position_ids=position_ids.gather(1, r_src),
        **cache_arg(backbone, cache),
        use_cache=True,
    )
    both = torch.cat([out2.last_hidden_state[inverse], out3.last_hidden_state], dim=1)
    # back to the rows' layout: column c < split_r from the prompt block, else the row's
    cols = torch.arange(shared, input_ids.shape[1], device=device)[None]
    source = torch.where(
        cols < split[:, None], cols - shared, prompt_width + (cols - split[:, None])
    ).clamp(0, both.shape[1] - 1)
    return both.gather(1, source[..., None].expand(-1, -1, both.shape[-1]))


def backbone_hidden(backbone, input_ids, attention_mask, position_ids, shared: int, groups=None):
    """``last_hidden_state`` of columns ``[shared, T)`` (B, T - shared, H); the first
    ``shared`` columns run once for row 0 and reach the other rows as a K/V cache.
    ``groups`` (:func:`prompt_groups`): rows sharing a prompt compute it once
    (:func:`grouped_hidden`)."""
    if groups is not None:
        return grouped_hidden(backbone, input_ids, attention_mask, position_ids, shared, groups)
    if shared == 0:
        return backbone(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            use_cache=False,
        ).last_hidden_state
    prefix = backbone(
        input_ids=input_ids[:1, :shared],
        attention_mask=attention_mask[:1, :shared],
        position_ids=position_ids[:1, :shared],
        use_cache=True,
    )
    cache = returned_cache(prefix)
    cache.batch_repeat_interleave(input_ids.shape[0])  # (1, ...) -> (B, ...), differentiable
    return backbone(
        input_ids=input_ids[:, shared:],
        attention_mask=attention_mask,
        position_ids=position_ids[:, shared:],
        **cache_arg(backbone, cache),
        use_cache=True,
    ).last_hidden_state


def prefix_sharing_allowed(backbone) -> bool:
    """False in training where transformers would drop the cache (gradient
    checkpointing) or where dropout is active (the rows would share one draw)."""
    if not backbone.training:
        return True
    if getattr(backbone, "gradient_checkpointing", False):
        return False
    import torch

    config = getattr(backbone, "config", None)
    if float(getattr(config, "attention_dropout", 0.0) or 0.0) > 0:
        return False
    return not any(isinstance(m, torch.nn.Dropout) and m.p > 0 for m in backbone.modules())


def position_ids_from_mask(attention_mask):
    """``(B, T)`` position ids that count only attended tokens (left padding -> 0).

    A left-padded row then sees the same positions as the unpadded sequence, so its
    logits (and log-probs) match an unpadded forward pass. For right padding this is
    ``arange(T)`` on the real tokens.
    """
    positions = attention_mask.long().cumsum(-1) - 1
    return positions.clamp_(min=0)


#: the method a sharded model gets for the split head (``ragen.distributed.fsdp``)
SHARDED_SPLIT = "ragen_split_logprobs"


def runs_whole(model) -> bool:
    """Whether ``model`` must run through its own methods only: an FSDP-sharded model
    (``ragen.distributed.fsdp``) gathers its root's weights in the hooks around its
    forward (and around :data:`SHARDED_SPLIT`, the split head registered as a forward
    method), so calling its backbone or head directly would meet sharded weights."""
    from torch.distributed.fsdp import FSDPModule

    return isinstance(model, FSDPModule)


def split_head(model):
    """``(backbone, lm_head)`` when logits == ``lm_head(backbone(...).last_hidden_state)``,
    else ``None``. Sees through a PEFT wrapper (LoRA layers live inside the backbone, so
    adapters, and ``disable_adapter()``, still apply). None for a sharded model
    (:func:`runs_whole`): ``sequence_logprobs`` calls its :data:`SHARDED_SPLIT`
    method, anything else its full forward, with the same result."""
    if runs_whole(model):
        return None
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    config = getattr(base, "config", None)
    if getattr(config, "model_type", None) not in PLAIN_HEAD_MODEL_TYPES:
        return None
    backbone = getattr(base, "model", None)
    head = base.get_output_embeddings() if hasattr(base, "get_output_embeddings") else None
    if backbone is None or head is None:
        return None
    return backbone, head


def sequence_logprobs(
    model,
    input_ids,
    attention_mask=None,
    temperature: float = 1.0,
    positions=None,
    with_entropy: bool = False,
    share_prefix: bool = True,
    dedupe: bool = True,
    **model_inputs,
):
    """Log-probs (and entropies) of ``input_ids`` given their prefixes.

    input_ids, attention_mask: ``(B, T)``, left or right padded.
    positions: optional ``(B, T)`` mask of the tokens whose log-prob is wanted (for RL,
        the response mask); others come back as 0. ``None``: every token.
    Returns ``log_prob`` ``(B, T)`` float32 with column 0 = 0 (no prefix), and
    ``entropy`` ``(B, T)`` of the distribution that chose token t (or ``None``).
    Differentiable (chunked, memory-lean softmax from ``ragen.algo``).
    ``model_inputs``: extra forward inputs, e.g. a VLM's ``pixel_values``
    (``ragen.models.vlm.pixel_inputs``); they take the full forward pass. A
    ``position_ids`` among them (M-RoPE's ``(3, B, T)``, ``ragen.models.vlm.positions_for``)
    replaces the mask-derived ``(B, T)`` positions. ``share_prefix``: run a prefix all
    rows share once (module doc; only with ``positions`` on a plain-head model).
    ``dedupe``: identical rows once, identical prompts once (module doc; with
    ``positions``, right-padded rows, no extra inputs).
    """
    # deferred: these import torch, and importing this module stays torch-free
    import torch

    from ragen.algo import entropy_from_logits, logprobs_from_logits

    if attention_mask is None:
        attention_mask = torch.ones_like(input_ids)
    copies = None
    if dedupe and positions is not None and not model_inputs:
        copies = duplicate_rows(input_ids, attention_mask, positions)
    if copies is not None:  # the distinct rows, then every row gathers its copy's output
        first, inverse = copies
        log_prob, entropy = sequence_logprobs(
            model,
            input_ids[first],
            attention_mask[first],
            temperature,
            positions[first],
            with_entropy,
            share_prefix,
            dedupe=True,
        )
        return log_prob[inverse], (entropy[inverse] if entropy is not None else None)
    scale = 1.0 if not temperature else float(temperature)
    position_ids = model_inputs.pop("position_ids", None)
    if position_ids is None:
        position_ids = position_ids_from_mask(attention_mask)
    targets = input_ids[:, 1:]
    wanted_only = positions is not None and not model_inputs
    sharded_split = getattr(model, SHARDED_SPLIT, None) if runs_whole(model) else None
    split = split_head(model) if wanted_only else None
    if wanted_only and sharded_split is not None:
        # FSDP gathers the root's weights around this call (and the ranks agree on the
        # shared prefix inside it: they must make the same sharded calls)
        log_prob, entropy = sharded_split(
            input_ids, attention_mask, position_ids, positions, scale, with_entropy, share_prefix
        )
    elif split is None:
        logits = model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            use_cache=False,
            **model_inputs,
        ).logits[:, :-1]
        logits = _scaled(logits, scale)  # (B, T-1, V): row t-1 predicts token t
        log_prob = logprobs_from_logits(logits, targets)
        entropy = entropy_from_logits(logits) if with_entropy else None
        if positions is not None:
            keep = positions[:, 1:].to(log_prob.dtype)
            log_prob = log_prob * keep
            entropy = entropy * keep if entropy is not None else None
    else:
        backbone, head = split
        shared = 0
        if share_prefix:
            shared = shared_prefix_columns(backbone, input_ids, attention_mask, positions)
        log_prob, entropy = split_logprobs(
            backbone, head, input_ids, attention_mask, position_ids, positions, scale,
            with_entropy, shared,
            dedupe and share_prefix,
        )  # fmt: skip
    pad = torch.nn.functional.pad
    return pad(log_prob, (1, 0), value=0.0), (
        pad(entropy, (1, 0), value=0.0) if entropy is not None else None
    )


def _scaled(logits, scale: float):
    """``logits.float() / scale``, without the (N, V) copy a division by 1 would make
    (``x / 1.0`` is ``x`` bit for bit)."""
    logits = logits.float()
    return logits if scale == 1.0 else logits / scale


def split_logprobs(
    backbone, head, input_ids, attention_mask, position_ids, positions, scale, with_entropy, shared,
    dedupe=False,
):  # fmt: skip
    """The split-head path of :func:`sequence_logprobs`: the backbone on the sequence
    (its first ``shared`` columns once), the LM head on the hidden states that predict a
    wanted token only; ``dedupe``: rows that share a prompt run it once (module doc,
    "Identical prompts"). Returns ``(B, T-1)`` log-probs and entropies (or None)."""
    # deferred: these import torch, and importing this module stays torch-free
    import torch

    from ragen.algo import entropy_from_logits, logprobs_from_logits

    from .head_logprobs import fusable_head, head_logprobs

    targets = input_ids[:, 1:]
    # columns [shared, T-1): column c predicts token c + 1
    groups = None
    if dedupe and prefix_sharing_allowed(backbone):
        groups = prompt_groups(input_ids, attention_mask, positions, shared)
    hidden = backbone_hidden(backbone, input_ids, attention_mask, position_ids, shared, groups)
    hidden = hidden[:, :-1]  # (B, T-1-shared, H)
    want = positions[:, 1:].bool()  # (B, T-1); False in the shared columns
    zeros = torch.zeros(want.shape, dtype=torch.float32, device=input_ids.device)
    wanted = hidden[want[:, shared:]]  # (N, H), N = wanted tokens
    if fusable_head(head):  # head + softmax in row chunks: no (N, V) logits kept
        lp, ent = head_logprobs(wanted, head, targets[want], scale, with_entropy)
    else:
        logits = _scaled(head(wanted), scale)  # (N, V)
        lp = logprobs_from_logits(logits, targets[want])
        ent = entropy_from_logits(logits) if with_entropy else None
    log_prob = zeros.masked_scatter(want, lp)
    entropy = zeros.masked_scatter(want, ent) if with_entropy else None
    return log_prob, entropy


def token_logprobs(model, input_ids, attention_mask=None, temperature: float = 1.0):
    """``(B, T)`` float32 log-probs of ``input_ids[:, t]`` given the prefix; column 0 is 0.

    ``input_ids``/``attention_mask``: ``(B, T)``, left or right padded (padded positions
    get arbitrary values; mask them). Gradients flow when called outside ``no_grad``.
    """
    return sequence_logprobs(model, input_ids, attention_mask, temperature)[0]


def wanted_logits(model, input_ids, attention_mask, positions):
    """Logits of the distributions that predict the wanted tokens, and those tokens.

    ``positions``: ``(B, T)`` mask of wanted tokens (column 0 is never predicted).
    Returns ``logits`` ``(N, V)`` float32 (N = wanted tokens, row-major) and ``targets``
    ``(N,)``. On a plain-head model the LM head runs on the N hidden states alone.
    """
    import torch

    position_ids = position_ids_from_mask(attention_mask)
    want = positions[:, 1:].bool()  # (B, T-1): column c predicts token c + 1
    targets = input_ids[:, 1:][want]
    split = split_head(model)
    if split is None:
        logits = model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            use_cache=False,
        ).logits[:, :-1]
        return logits[want].float(), targets
    backbone, head = split
    hidden = backbone_hidden(backbone, input_ids, attention_mask, position_ids, 0)[:, :-1]
    return head(hidden[want]).to(torch.float32), targets
