# Over 600 lines: one generate call's state (the left-padded batch, the preallocated K/V
# buffers, the per-row prefix store, the stop-string checks) is shared by every part here.
"""Batched generation with a local transformers model: sampled ids + their log-probs.

    engine = HFEngine(model, tokenizer)            # the model is shared, never copied
    gens = engine.generate(prompt_id_lists, SamplingParams(temperature=1.0, seed=0))

One call generates for every prompt at once with our own sampling loop (not
``model.generate``):

* prompts are LEFT-padded into one ``(B, L)`` batch; position ids count only real
  tokens, so a padded row computes exactly what it would alone;
* prefill computes logits for the last position only (``logits_to_keep=1``), then
  one token per step with a KV cache whose buffers are allocated once for
  prompt + ``max_new_tokens`` positions (:class:`PreallocatedLayer`). transformers'
  ``DynamicCache`` concatenates, i.e. copies the whole cache every step: on CPU that
  copy was ~80% of a decode step;
* rows that finish (stop string, EOS, length) are DROPPED from the batch and the KV
  cache once they make up 1/8 of it (dropping copies the cache, so it is batched),
  and the remaining rows stop paying for them; ``model.generate`` computes finished
  rows to the end. ``bench/bench_generate.py`` measures both.

Prefix reuse across calls (``prefix_cache=True``, the default): multi-turn rollouts
send each episode's whole history again every turn, and that history starts with
exactly the ids of the previous call (prompt + sampled ids, the token-exact context).
After each call the engine keeps the K/V of every row's ``prompt + ids[:-1]``; a new
prompt that extends one of them only computes its new tokens (the batch computes the
last ``max(new tokens)`` columns; older columns are copied in). The kept K/V belong
to the weights they were computed with: any in-place change of a parameter (an
optimizer step, ``load_state_dict``) bumps its version counter and empties the store
at the next call, as does switching PEFT adapters on/off. ``clear_prefix_cache()``
frees it explicitly (e.g. before training on a GPU).

Shared prefix within a call (with ``prefix_cache``): the prompts of one rollout turn
start with the same system prompt and instructions (68% of a demo Sokoban prompt, 76
of ~114 ids, and with ``rollout.context_window=0`` every turn is such a fresh prompt).
When all prompts share at least :data:`MIN_SHARED_PREFIX` leading ids, that prefix is
computed ONCE, for one row, and copied into every row like a reused prefix, so the
batch computes only what follows it.

Sampling (``sample_next_token``): ``logp = log_softmax(logits / T)`` (T = 0 -> greedy
argmax, with T = 1 for the reported log-prob); top-k, then top-p (nucleus) truncation
of that distribution; a draw from the renormalized remainder by inverse CDF with one
uniform per row from a seeded ``torch.Generator``, or, with ``SamplingParams.row_seeds``,
from each row's own counter-based stream (``ragen.engines.draws``: a row then samples the
same ids in any batch). ``Generation.logprobs`` holds
``logp[sampled id]`` BEFORE truncation; ``ragen.models.logprobs.token_logprobs``
recomputes the same number.

Stopping, per row: an EOS id (the tokenizer's eos, the generation config's eos ids
and known end-of-turn tokens; the id is kept), the first time the decoded tail of
the generated ids contains a stop string (the ids end with the token that completed
it; a token carrying text past the stop string is kept whole, never split), or
``max_new_tokens``.
"""

from __future__ import annotations

import functools
import inspect
import math
import time
from dataclasses import dataclass

from ragen.errors import ConfigError
from ragen.models.kv_cache import cache_arg
from ragen.progress import Progress

from .base import Generation, SamplingParams
from .draws import Draws

#: end-of-turn / end-of-text tokens of common chat formats; treated as EOS when present
KNOWN_END_TOKENS = (
    "<|im_end|>",
    "<|endoftext|>",
    "<|eot_id|>",
    "<|end_of_text|>",
    "<end_of_turn>",
    "<|end|>",
    "</s>",
)


@dataclass
class GenerationStats:
    """Cumulative counters of an engine (``engine.stats``); ``reset()`` zeroes them."""

    calls: int = 0
    sequences: int = 0
    prompt_tokens: int = 0
    generated_tokens: int = 0
    seconds: float = 0.0
    reused_prompt_tokens: int = 0  # prompt positions whose K/V came from the prefix store
    prefill_seconds: float = 0.0  # share of ``seconds`` in the prompt forward (the rest: decode)
    decode_steps: int = 0  # batched decode forwards (one per generated column after the first)
    duplicate_prompts: int = 0  # prompts whose prefill an identical prompt of the call did

    @property
    def tokens_per_s(self) -> float:
        return self.generated_tokens / self.seconds if self.seconds > 0 else 0.0

    def reset(self) -> None:
        self.calls = self.sequences = self.prompt_tokens = self.generated_tokens = 0
        self.reused_prompt_tokens = self.decode_steps = self.duplicate_prompts = 0
        self.seconds = self.prefill_seconds = 0.0

    def as_dict(self) -> dict[str, float]:
        return {
            "calls": self.calls,
            "sequences": self.sequences,
            "prompt_tokens": self.prompt_tokens,
            "generated_tokens": self.generated_tokens,
            "reused_prompt_tokens": self.reused_prompt_tokens,
            "seconds": self.seconds,
            "prefill_seconds": self.prefill_seconds,
            "decode_steps": self.decode_steps,
            "duplicate_prompts": self.duplicate_prompts,
            "tokens_per_s": self.tokens_per_s,
        }


def check_prompts(prompts: list[list[int]], vocab: int | None) -> None:
    """Raise a clear ``ValueError`` for an empty prompt or ids outside ``[0, vocab)``."""
    for i, p in enumerate(prompts):
        if len(p) == 0:
            raise ValueError(f"prompt {i} is empty; every prompt needs at least one token")
        if vocab is not None and (min(p) < 0 or max(p) >= vocab):
            raise ValueError(
                f"prompt {i} has token ids outside [0, {vocab}); was it made by another tokenizer?"
            )


def timed_eval_call(model, stats: GenerationStats, prompts: list[list[int]], run):
    """``run()`` (a generation loop returning :class:`Generation` s for ``prompts``) with
    ``model`` in eval mode and gradients off, its previous mode restored after; the call
    is counted in ``stats``. Shared by the text and VLM engines."""
    import torch

    start = time.perf_counter()
    was_training = model.training
    model.eval()
    try:
        # no_grad rather than inference_mode: tensors made here (e.g. rotary caches)
        # must stay usable when the same model trains right after.
        with torch.no_grad():
            gens = run()
    finally:
        model.train(was_training)
    stats.calls += 1
    stats.sequences += len(prompts)
    stats.prompt_tokens += sum(len(p) for p in prompts)
    stats.generated_tokens += sum(len(g.token_ids) for g in gens)
    stats.seconds += time.perf_counter() - start
    return gens


def check_sampling_params(params: SamplingParams) -> None:
    """Raise a one-line ``ConfigError`` (a ``ValueError``) for out-of-range sampling parameters."""
    if params.temperature < 0 or math.isnan(params.temperature):
        raise ConfigError(f"temperature must be >= 0 (0 = greedy), got {params.temperature}")
    if not 0.0 < params.top_p <= 1.0:
        raise ConfigError(f"top_p must be in (0, 1], got {params.top_p}")
    if params.top_k < 0:
        raise ConfigError(f"top_k must be >= 0 (0 = off), got {params.top_k}")
    if params.max_new_tokens < 0:
        raise ConfigError(f"max_new_tokens must be >= 0, got {params.max_new_tokens}")
    if any(not s for s in params.stop_strings or []):
        raise ValueError("stop_strings must not contain empty strings")


def sample_next_token(
    logits, temperature: float, top_p: float, top_k: int, generator=None, uniform=None
):
    """Draw one token per row. ``logits``: ``(b, V)``. Returns ``(ids (b,), logp (b,))``.

    ``logp = log_softmax(logits / T)[id]`` (T = 0 -> greedy argmax and T = 1 for logp),
    i.e. the log-prob under the temperature-scaled distribution BEFORE top-k / top-p.

    The draw is by inverse CDF: one uniform ``u`` per row (``uniform`` (b,), else drawn
    from ``generator``) picks the first id whose cumulative truncated probability exceeds
    ``u * total``. One random number per row instead of ``torch.multinomial``'s per-row
    setup: on CPU multinomial cost ~6 ms per step of 128 rows x 3k vocab, a third of a
    decode step. Drawing ``u`` outside lets a compiled step reproduce the same ids.

    On a CPU the rows go in chunks of about :data:`SAMPLE_CHUNK_ELEMENTS` logits, so the
    pass's ``(rows, V)`` temporaries stay in cache; every step is per row, so the ids and
    log-probs are bitwise those of one pass (the uniforms are drawn once, up front).
    """
    import torch

    if temperature > 0 and uniform is None:
        uniform = torch.rand(logits.shape[0], generator=generator, device=logits.device)
    rows = logits.shape[0]
    if logits.device.type == "cpu":
        rows = max(1, SAMPLE_CHUNK_ELEMENTS // max(logits.shape[-1], 1))
    if rows >= logits.shape[0]:
        return _sample_rows(logits, temperature, top_p, top_k, uniform)
    parts = [
        _sample_rows(
            logits[i : i + rows],
            temperature,
            top_p,
            top_k,
            None if uniform is None else uniform[i : i + rows],
        )
        for i in range(0, logits.shape[0], rows)
    ]
    return torch.cat([ids for ids, _ in parts]), torch.cat([lp for _, lp in parts])


#: logits per chunk of rows :func:`sample_next_token` draws at once on a CPU (1 MB)
SAMPLE_CHUNK_ELEMENTS = 1 << 18


def _sample_rows(logits, temperature: float, top_p: float, top_k: int, uniform):
    """:func:`sample_next_token` on one block of rows (``uniform`` drawn already)."""
    import torch

    logits = logits.float()
    if temperature > 0 and temperature != 1.0:  # x / 1 == x: skip a (b, V) pass
        logits = logits / temperature
    logp = torch.log_softmax(logits, dim=-1)
    if temperature == 0:
        ids = logp.argmax(dim=-1)
    else:
        ids = inverse_cdf_sample(truncate_logprobs(logp, top_p, top_k), uniform)
    return ids, logp.gather(-1, ids.unsqueeze(-1)).squeeze(-1)


def truncate_logprobs(logp, top_p: float, top_k: int):
    """``logp`` (b, V) with tokens outside the top-k, then outside the top-p nucleus, set
    to -inf (k = 0 and p = 1 are off)."""
    import torch

    filtered = logp
    if 0 < top_k < logp.shape[-1]:
        kth = torch.topk(logp, top_k, dim=-1).values[:, -1:]
        filtered = filtered.masked_fill(filtered < kth, float("-inf"))
    if top_p < 1.0:
        sorted_logp, order = torch.sort(filtered, dim=-1, descending=True)
        probs = sorted_logp.softmax(dim=-1)
        # drop a token when the mass BEFORE it already reaches top_p (the top one stays)
        drop = (probs.cumsum(dim=-1) - probs) >= top_p
        sorted_logp = sorted_logp.masked_fill(drop, float("-inf"))
        filtered = torch.full_like(filtered, float("-inf")).scatter(-1, order, sorted_logp)
    return filtered


def inverse_cdf_sample(logp, uniform):
    """Ids ``(b,)`` drawn from ``softmax(logp)`` (b, V) by the uniforms ``u`` (b,) in [0, 1):
    ``id = min{i : cdf_i > u * cdf_V}``. A -inf token adds 0 to the cdf, so it is never
    picked; the clamp guards ``u * cdf_V`` rounding up to the total."""
    import torch

    cdf = torch.softmax(logp, dim=-1).cumsum(dim=-1)
    target = (uniform.to(cdf.dtype) * cdf[:, -1]).unsqueeze(-1)
    ids = torch.searchsorted(cdf, target, right=True).squeeze(-1)
    return ids.clamp(max=logp.shape[-1] - 1)


#: drop finished rows from the batch once they are at least this fraction of it
COMPACT_FRACTION = 1 / 8

#: leading ids all prompts of a call must share before that prefix is computed once
MIN_SHARED_PREFIX = 16


def common_prefix_length(prompts: list[list[int]]) -> int:
    """Length of the longest prefix shared by every prompt, capped at the shortest
    prompt's length - 1 (every row must compute at least its last id's logits)."""
    first, n = prompts[0], min(len(p) for p in prompts) - 1
    for prompt in prompts[1:]:
        i = 0
        while i < n and prompt[i] == first[i]:
            i += 1
        n = i
        if n == 0:
            break
    return max(n, 0)


def distinct_prompts(prompts: list[list[int]]) -> tuple[list[list[int]], list[int]]:
    """The distinct prompts in first-seen order, and for every prompt the index of its
    distinct prompt: ``prompts[i] == distinct[inverse[i]]``."""
    first: dict[tuple[int, ...], int] = {}
    distinct, inverse = [], []
    for prompt in prompts:
        key = tuple(prompt)
        j = first.get(key)
        if j is None:
            j = first[key] = len(distinct)
            distinct.append(prompt)
        inverse.append(j)
    return distinct, inverse


#: ``_DecodeBuffers.reason`` codes and the finish reasons they stand for
_LENGTH, _EOS, _STOP = 0, 1, 2
_REASONS = ("length", "eos", "stop")


class _DecodeBuffers:
    """What a call generated, per ORIGINAL row, kept as tensors on the device: the
    sampled ids and their log-probs ``(B, max_new)`` (column = step), how many ids each
    row generated, and why it stopped. One column write per step replaces a Python loop
    over the rows; :meth:`lists` converts once at the end."""

    def __init__(self, batch: int, max_new: int, device):
        import torch

        self.ids = torch.zeros((batch, max_new), dtype=torch.long, device=device)
        self.logprobs = torch.zeros((batch, max_new), dtype=torch.float32, device=device)
        self.count = torch.zeros(batch, dtype=torch.long, device=device)
        self.reason = torch.full((batch,), _LENGTH, dtype=torch.long, device=device)

    def record(self, step: int, rows, alive, ids, logps) -> None:
        """Column ``step``: ``ids``/``logps`` (b,) of batch rows ``rows`` (their original
        rows); only ``alive`` rows count it (a finished row awaiting removal is ignored)."""
        import torch

        self.ids[rows, step] = ids
        self.logprobs[rows, step] = logps.float()
        self.count[rows] = torch.where(alive, step + 1, self.count[rows])

    def lists(self) -> tuple[list[list[int]], list[list[float]], list[str]]:
        counts = self.count.tolist()
        ids = [row[:n] for row, n in zip(self.ids.tolist(), counts)]
        logprobs = [row[:n] for row, n in zip(self.logprobs.tolist(), counts)]
        return ids, logprobs, [_REASONS[r] for r in self.reason.tolist()]


@functools.cache
def _preallocated_layer_class():
    """``PreallocatedLayer`` (defined lazily: transformers is imported only when needed;
    once, so every cache's layers share one type, which a compiled step guards on)."""
    from transformers.cache_utils import DynamicLayer

    class PreallocatedLayer(DynamicLayer):
        """A full-attention KV layer writing into buffers of fixed ``capacity`` positions.

        ``keys``/``values`` are views ``buffer[:, :, :length]`` of shape
        ``(B, H_kv, length, D)``; an update writes in place (no per-step copy).
        ``kv_dtype`` (None: that of the first K/V written) stores the buffers narrower,
        e.g. bf16; an update then returns widened copies for transformers' attention
        (prefill), while the C decode kernel reads the buffers as they are.
        """

        def __init__(self, capacity: int, kv_dtype=None):
            super().__init__()
            self.capacity = int(capacity)
            self.kv_dtype = kv_dtype  # None: the dtype of the first K/V written
            self.length = 0

        def lazy_initialization(self, key_states, value_states) -> None:
            b, h, _, d = key_states.shape
            self.allocate(b, (h, d), value_states.shape[1::2], key_states)

        def allocate(self, batch: int, key_shape, value_shape, like) -> None:
            """Zeroed buffers ``(batch, H, capacity, D)``; zeros, not garbage, because
            masked (padding) columns still enter attention as 0-weight terms, and
            0 * NaN would poison the row."""
            self.dtype, self.device = self.kv_dtype or like.dtype, like.device
            self._key_buffer = like.new_zeros(
                (batch, key_shape[0], self.capacity, key_shape[1]), dtype=self.dtype
            )
            self._value_buffer = like.new_zeros(
                (batch, value_shape[0], self.capacity, value_shape[1]), dtype=self.dtype
            )
            self._set_views()
            self.is_initialized = True

        def _set_views(self) -> None:
            self.keys = self._key_buffer[:, :, : self.length]
            self.values = self._value_buffer[:, :, : self.length]

        def update(self, key_states, value_states, *args, **kwargs):
            if not self.is_initialized:
                self.lazy_initialization(key_states, value_states)
            end = self.length + key_states.shape[-2]
            if end > self.capacity:
                raise RuntimeError(f"KV cache capacity {self.capacity} exceeded ({end} positions)")
            self._key_buffer[:, :, self.length : end] = key_states
            self._value_buffer[:, :, self.length : end] = value_states
            self.length = end
            self._set_views()
            if self.dtype != key_states.dtype:  # a narrower store (kv_dtype): compute in
                return self.keys.to(key_states.dtype), self.values.to(value_states.dtype)
            return self.keys, self.values

        def get_seq_length(self) -> int:
            return self.length if self.is_initialized else 0

        def batch_select_indices(self, indices) -> None:
            if self.is_initialized:
                self._key_buffer = self._key_buffer[indices]
                self._value_buffer = self._value_buffer[indices]
                self._set_views()

        def crop(self, tokens_to_remove: int) -> None:
            raise NotImplementedError("PreallocatedLayer does not crop")

    return PreallocatedLayer


def make_kv_cache(model, capacity: int, kv_dtype=None):
    """A ``DynamicCache`` whose full-attention layers are preallocated to ``capacity``.

    Layers of other kinds (sliding window, linear attention) keep transformers' own
    implementation; with a transformers version whose cache has no ``layers`` list the
    plain ``DynamicCache`` is returned.
    """
    from transformers import DynamicCache
    from transformers.cache_utils import DynamicLayer

    cache = DynamicCache(config=getattr(model, "config", None))
    layers = getattr(cache, "layers", None)
    if not layers:
        return cache
    layer_class = _preallocated_layer_class()
    cache.layers = [
        layer_class(capacity, kv_dtype) if type(layer) is DynamicLayer else layer
        for layer in layers
    ]
    return cache


@dataclass
class _PrefixEntry:
    ids: tuple[int, ...]
    keys: list  # per layer: (H_kv, len(ids), D)
    values: list

    @classmethod
    def copied(cls, ids, layers, row: int, first: int, end: int) -> _PrefixEntry:
        """Copies of columns ``[first, end)`` of batch row ``row`` of every layer's K/V."""
        return cls(
            ids=ids,
            keys=[layer._key_buffer[row, :, first:end].clone() for layer in layers],
            values=[layer._value_buffer[row, :, first:end].clone() for layer in layers],
        )


class PrefixStore:
    """K/V of the sequences one ``generate`` call produced, found by exact id prefix."""

    def __init__(self, fingerprint=None):
        self.fingerprint = fingerprint
        self._by_length: dict[int, dict[tuple[int, ...], _PrefixEntry]] = {}
        self._last_ids: dict[int, set[int]] = {}  # cheap pre-check per length

    def __len__(self) -> int:
        return sum(len(v) for v in self._by_length.values())

    def add(self, entry: _PrefixEntry) -> None:
        n = len(entry.ids)
        self._by_length.setdefault(n, {})[entry.ids] = entry
        self._last_ids.setdefault(n, set()).add(entry.ids[-1])

    def __contains__(self, ids: tuple[int, ...]) -> bool:
        return ids in self._by_length.get(len(ids), {})

    def longest_prefix(self, prompt: tuple[int, ...]) -> _PrefixEntry | None:
        """The longest stored sequence that is a STRICT prefix of ``prompt`` (at least
        one prompt token must remain to compute the next-token logits)."""
        for n in sorted(self._by_length, reverse=True):
            if n >= len(prompt) or prompt[n - 1] not in self._last_ids[n]:
                continue
            entry = self._by_length[n].get(prompt[:n])
            if entry is not None:
                return entry
        return None


def weights_fingerprint(model):
    """Identity, storage and in-place version of every parameter.

    An optimizer step or ``copy_`` bumps ``_version``; ``load_state_dict(assign=True)``
    or ``.to()`` changes the object or its storage.
    """
    try:
        params = tuple((id(p), p.data_ptr(), p._version) for p in model.parameters())
    except RuntimeError:  # inference-mode tensors have no version counter
        return None
    return params + _adapter_state(model)


def _adapter_state(model) -> tuple:
    """For a PEFT model: which adapters are active or disabled in each tuner layer
    (``disable_adapter()`` / ``set_adapter`` change outputs without touching weights)."""
    if not hasattr(model, "get_base_model"):
        return ()
    state = []
    for module in model.modules():
        disabled = getattr(module, "disable_adapters", None)
        if isinstance(disabled, bool):
            active = getattr(module, "active_adapters", ())
            state.append((disabled, tuple(active) if isinstance(active, (list, tuple)) else active))
    return tuple(state)


def model_device(model):
    import torch

    try:
        return next(model.parameters()).device
    except StopIteration:
        return torch.device("cpu")


def left_padded_batch(prompts: list[list[int]], pad_id: int, device):
    """Left-pad ``prompts`` into one batch: ``input_ids`` and ``attention`` (B, W) with W
    the longest prompt, ``positions`` (B, W) counting real tokens only (pads sit at 0), and
    ``next_position`` (B,) = each prompt's length, the position of its first new token."""
    import torch

    batch, width = len(prompts), max(len(p) for p in prompts)
    input_ids = torch.full((batch, width), pad_id, dtype=torch.long)
    attention = torch.zeros((batch, width), dtype=torch.long)
    for row, prompt in enumerate(prompts):
        input_ids[row, width - len(prompt) :] = torch.tensor(prompt, dtype=torch.long)
        attention[row, width - len(prompt) :] = 1
    input_ids, attention = input_ids.to(device), attention.to(device)
    positions = (attention.cumsum(-1) - 1).clamp(min=0)
    next_position = torch.tensor([len(p) for p in prompts], dtype=torch.long, device=device)
    return input_ids, attention, positions, next_position


def finished_generations(tokenizer, token_ids, logprobs, reasons) -> list[Generation]:
    """One :class:`Generation` per row: the sampled ids, their log-probs, the decoded text
    (special tokens dropped) and why the row stopped."""
    texts = tokenizer.batch_decode(
        token_ids, skip_special_tokens=True, clean_up_tokenization_spaces=False
    )
    return [
        Generation(token_ids=t, logprobs=lp, text=text, finish_reason=r)
        for t, lp, text, r in zip(token_ids, logprobs, texts, reasons)
    ]


def new_token_budget(width: int, max_new: int, max_positions: int | None) -> int:
    """Tokens a batch whose longest prompt has ``width`` ids may still generate:
    ``min(max_new, max_positions - width)``; a prompt that already fills the model's
    context is an error naming the fix (generating nothing would lose the turn silently)."""
    if max_positions is None:
        return max_new
    if width >= max_positions:
        raise ValueError(
            f"prompt of {width} tokens does not fit the model context "
            f"({max_positions} positions); shorten the history or raise the limit"
        )
    return min(max_new, max_positions - width)


def default_eos_ids(model, tokenizer) -> list[int]:
    """EOS ids for ``model``: tokenizer eos + generation-config eos + known end-of-turn tokens."""
    ids: set[int] = set()
    if tokenizer.eos_token_id is not None:
        ids.add(int(tokenizer.eos_token_id))
    gen_cfg = getattr(model, "generation_config", None)
    eos = getattr(gen_cfg, "eos_token_id", None)
    if eos is not None:
        ids.update([int(eos)] if isinstance(eos, int) else [int(e) for e in eos])
    vocab = tokenizer.get_vocab()
    ids.update(vocab[t] for t in KNOWN_END_TOKENS if t in vocab)
    return sorted(ids)


class HFEngine:
    """Token engine over a transformers causal LM (or a PEFT wrapper of one).

    ``device`` defaults to the model's device. ``eos_token_ids`` overrides
    :func:`default_eos_ids`. ``prefix_cache`` keeps the last call's K/V for prompts
    that extend it; ``share_prefix`` (with it) computes the prefix all prompts of a
    call share once. ``stats`` accumulates generated tokens and seconds.
    """

    def __init__(
        self,
        model,
        tokenizer,
        device=None,
        eos_token_ids: list[int] | None = None,
        prefix_cache: bool = True,
        share_prefix: bool = True,
    ):
        import torch

        self.model = model
        self.tokenizer = tokenizer
        self.device = torch.device(device) if device is not None else model_device(model)
        self.eos_token_ids = (
            sorted(set(eos_token_ids))
            if eos_token_ids is not None
            else default_eos_ids(model, tokenizer)
        )
        pad = tokenizer.pad_token_id
        self.pad_token_id = int(pad) if pad is not None else (self.eos_token_ids or [0])[0]
        config = getattr(model, "config", None)
        self.max_positions = getattr(config, "max_position_embeddings", None)
        embeddings = (
            model.get_input_embeddings() if hasattr(model, "get_input_embeddings") else None
        )
        self.vocab_size = getattr(embeddings, "num_embeddings", None)
        self.stats = GenerationStats()
        self._keeps_last_logits_only = accepts_logits_to_keep(model)
        self.prefix_cache = prefix_cache
        self.share_prefix = share_prefix
        self._store = PrefixStore()
        self._stop_filters: dict[tuple[str, ...], object] = {}
        self._tables: dict[tuple, object] = {}  # id lookup tables (_end_table, _stop_table)

    def reset_stats(self) -> None:
        self.stats.reset()

    def clear_prefix_cache(self) -> None:
        """Free the K/V kept from the last call (see "Prefix reuse" in the module doc)."""
        self._store = PrefixStore()

    # ------------------------------------------------------------------------------------
    def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[Generation]:
        """Sample a continuation for every prompt in ONE batched loop; see the module doc."""
        check_sampling_params(params)
        if not prompts:
            return []
        check_prompts(prompts, self.vocab_size)
        return timed_eval_call(
            self.model, self.stats, prompts, lambda: self._generate(prompts, params)
        )

    def _generate(self, prompts: list[list[int]], params: SamplingParams) -> list[Generation]:
        import torch

        device = self.device
        batch = len(prompts)
        width = max(len(p) for p in prompts)
        max_new = new_token_budget(width, params.max_new_tokens, self.max_positions)
        if max_new == 0:
            return self._finish([[] for _ in prompts], [[] for _ in prompts], ["length"] * batch)
        fingerprint = weights_fingerprint(self.model) if self.prefix_cache else None
        if self._store.fingerprint != fingerprint or fingerprint is None:
            self._store = PrefixStore(fingerprint)  # stale K/V: free before allocating
        keep_kv = self.prefix_cache and params.keep_kv
        new_store = PrefixStore(fingerprint)

        # identical prompts (a group's episodes in the same state) are prefilled once and
        # their K/V copied to every row that asked (see "Identical prompts")
        distinct, inverse = distinct_prompts(prompts) if self.dedupe_prompts else (prompts, None)
        if inverse is not None and len(distinct) == batch:
            distinct, inverse = prompts, None
        input_ids, attention, positions, next_position = left_padded_batch(
            distinct, self.pad_token_id, device
        )
        draws = Draws(params, batch, device)  # the call's generator, or a stream per row

        cache = make_kv_cache(self.model, width + max_new, self.kv_dtype)
        layers = _preallocated_layers(cache) if self.prefix_cache else None
        prefill_start = time.perf_counter()
        if layers and self.share_prefix:
            self._store_shared_prefix(distinct)
        self.stats.prefill_seconds += time.perf_counter() - prefill_start
        start = self._preload_prefixes(layers, distinct, width) if layers else 0
        self._store = PrefixStore()  # its K/V are copied in; free them
        prefill_start = time.perf_counter()
        logits = self._prefill(cache, attention, input_ids[:, start:], positions[:, start:])
        if inverse is not None:  # distinct rows -> every row (the K/V of columns < width)
            index = torch.tensor(inverse, dtype=torch.long, device=device)
            cache.batch_select_indices(index)
            self.stats.duplicate_prompts += batch - len(distinct)
            logits, attention, next_position = logits[index], attention[index], next_position[index]
        self.stats.prefill_seconds += time.perf_counter() - prefill_start
        attention = self._start_decode(cache, attention, width + max_new)
        out = _DecodeBuffers(batch, max_new, device)
        stops = list(params.stop_strings or [])
        is_end = self._end_table(logits.shape[-1], device)
        may_stop = self._stop_table(stops, logits.shape[-1], device) if stops else None
        # Tokens to decode so the tail surely covers the longest stop string: a character
        # takes at most 4 UTF-8 bytes, and a byte-level token holds at least one byte.
        window = 4 * max((len(s) for s in stops), default=0) + 2
        rows = torch.arange(batch, device=device)  # original row of each batch row
        alive = torch.ones(batch, dtype=torch.bool, device=device)  # per batch row
        decoding = Progress(f"decoding {batch} replies", max_new, "token")
        for step in range(max_new):
            decoding.advance()
            ids, logps = self._sample(logits, params, draws.uniform(rows, step))
            out.record(step, rows, alive, ids, logps)
            eos = alive & is_end[ids]
            out.reason[rows[eos]] = _EOS
            alive = alive & ~eos
            if may_stop is not None:
                alive = self._check_stops(out, step, rows, alive, may_stop[ids], stops, window)
            if step == max_new - 1:
                break  # rows still running keep finish_reason "length"
            n_alive = int(alive.sum())  # the loop's one host sync per step
            if not n_alive:
                break
            if len(rows) - n_alive >= max(1, COMPACT_FRACTION * len(rows)):
                # Drop finished rows from every tensor and the KV cache.
                if layers and keep_kv:
                    self._keep_rows(new_store, layers, ~alive, rows, prompts, out, width)
                index = alive.nonzero().flatten()
                self._compact(cache, index)
                attention, ids, next_position = attention[index], ids[index], next_position[index]
                rows, alive = rows[index], alive[index]
            attention, logits = self._decode_step(cache, attention, ids, next_position)
            self.stats.decode_steps += 1
            next_position = next_position + 1
        decoding.close()
        if layers and keep_kv:
            self._keep_rows(new_store, layers, torch.ones_like(alive), rows, prompts, out, width)
            self._store = new_store
        token_ids, logprobs, reasons = out.lists()
        return self._finish(token_ids, logprobs, reasons)

    #: prefill each distinct prompt of a call once (identical prompts share its K/V)
    dedupe_prompts = True

    def _check_stops(self, out, step, rows, alive, candidates, stops, window):
        """``alive`` with the rows whose decoded tail now holds a stop string cleared
        (their reason set to stop). Only ``candidates`` (alive rows whose new token can
        end a stop string, :meth:`_stop_table`) are decoded."""
        check = (alive & candidates).nonzero().flatten()
        if not len(check):
            return alive
        # an alive row generated at every step so far: its tail is columns [lo, step]
        lo = max(0, step + 1 - window)
        tails = self.tokenizer.batch_decode(
            out.ids[rows[check], lo : step + 1].tolist(),
            skip_special_tokens=False,
            clean_up_tokenization_spaces=False,
        )
        hit = [i for i, tail in zip(check.tolist(), tails) if any(s in tail for s in stops)]
        if hit:
            import torch

            hit_rows = torch.tensor(hit, dtype=torch.long, device=alive.device)
            out.reason[rows[hit_rows]] = _STOP
            alive = alive.clone()
            alive[hit_rows] = False
        return alive

    def _store_shared_prefix(self, prompts) -> None:
        """Add the K/V of the prompts' common prefix (one row's forward) to the store,
        unless it is shorter than :data:`MIN_SHARED_PREFIX` or already stored."""
        import torch

        n = common_prefix_length(prompts) if len(prompts) > 1 else 0
        shared = tuple(prompts[0][:n])
        if n < MIN_SHARED_PREFIX or shared in self._store:
            return
        cache = make_kv_cache(self.model, n, self.kv_dtype)
        layers = _preallocated_layers(cache)
        ids = torch.tensor([shared], dtype=torch.long, device=self.device)
        self._prefill(cache, torch.ones_like(ids), ids, torch.arange(n, device=self.device)[None])
        self._store.add(_PrefixEntry.copied(shared, layers, 0, 0, n))

    #: dtype of the KV cache buffers (None: the model's); ``StaticHFEngine(bf16_kv=True)``
    #: stores bf16 (opt-in, not exact)
    kv_dtype = None

    #: skip the stop-string decode for rows whose new token cannot complete one (exact;
    #: see _may_complete_stop); False decodes every row's tail every step
    prefilter_stops = True

    def _may_complete_stop(self, stops: list[str]):
        """``f(token_id) -> bool``: False only when that token cannot complete any of
        ``stops``.

        A stop string absent from the tail before a token and present after it ends
        inside that token's text, so the token's text contains the string's LAST
        character. For ASCII last characters this holds for byte-level tokens too
        (an ASCII byte decodes to itself even next to a partial UTF-8 sequence), so
        the filter is exact; otherwise, and for a whitespace last character (a
        SentencePiece token decoded alone drops its leading space), every token is a
        candidate. Decoding each vocab entry once per stop set (once per engine; ~1 s
        for a 150k vocabulary) replaces decoding ~128 tails of ~40 tokens every step
        (1.4-2.7 ms of a 10-20 ms step of tiny:nano x 128 rows).
        """
        key = tuple(stops)
        cached = self._stop_filters.get(key)
        if cached is not None:
            return cached
        last = {s[-1] for s in stops}
        if not self.prefilter_stops or not all(c.isascii() and not c.isspace() for c in last):
            fn = _always
        else:
            vocab = len(self.tokenizer)
            texts = self.tokenizer.batch_decode(
                [[i] for i in range(vocab)],
                skip_special_tokens=False,
                clean_up_tokenization_spaces=False,
            )
            hits = frozenset(i for i, text in enumerate(texts) if any(c in text for c in last))
            fn = functools.partial(_member_or_out_of_range, hits, vocab)
        self._stop_filters[key] = fn
        return fn

    # -- the decode step; ragen.engines.compiled overrides these three ------------------
    def _start_decode(self, cache, attention, capacity: int):
        """After the prefill: the per-row attention state the decode steps carry."""
        return self._decode_mask(attention, capacity)

    def _compact(self, cache, index) -> None:
        """Keep batch rows ``index`` (the finished ones leave the cache)."""
        cache.batch_select_indices(index)

    def _physical_row(self, b: int) -> int:
        """The cache row holding batch row ``b`` (the same, unless rows stay in place)."""
        return b

    def _decode_mask(self, attention, capacity: int):
        """The per-row attention state the decode steps carry (here: the 2-D 0/1 mask of
        the prompt columns, one column appended per step); row-indexable."""
        return attention

    def _sample(self, logits, params: SamplingParams, uniform):
        return sample_next_token(
            logits, params.temperature, params.top_p, params.top_k, uniform=uniform
        )

    def _prefill(self, cache, attention, ids, positions):
        """Feed the prompt block ``ids`` (b, S) at ``positions`` (b, S) after the cache's
        reused columns; ``attention`` (b, W) is the 0/1 mask of all W columns. Returns the
        logits of the last column (b, V)."""
        extra = {"logits_to_keep": 1} if self._keeps_last_logits_only else {}
        out = self.model(
            input_ids=ids,
            attention_mask=attention,
            position_ids=positions,
            **cache_arg(self.model, cache),
            use_cache=True,
            **extra,
        )
        return out.logits[:, -1, :]

    def _decode_step(self, cache, attention, ids, positions):
        """Feed ``ids`` (b,) at ``positions`` (b,); returns ``(attention, logits (b, V))``."""
        import torch

        attention = torch.cat([attention, attention.new_ones((attention.shape[0], 1))], dim=-1)
        out = self.model(
            input_ids=ids.unsqueeze(-1),
            attention_mask=attention,
            position_ids=positions.unsqueeze(-1),
            **cache_arg(self.model, cache),
            use_cache=True,
        )
        return attention, out.logits[:, -1, :]

    def _preload_prefixes(self, layers, prompts, width: int) -> int:
        """Copy stored K/V into the cache for prompts extending a stored sequence.

        Row ``i`` (prompt length ``p_i``, right-aligned in ``width`` columns) reuses its
        first ``c_i`` positions; it must compute ``s_i = p_i - c_i`` new ones, so the
        batch computes the last ``S = max_i s_i`` columns and the columns before are
        copied in. Returns the first column to compute (0 = nothing reused).
        """
        if not len(self._store):
            return 0
        hits = [self._store.longest_prefix(tuple(p)) for p in prompts]
        if not any(hits):
            return 0
        block = max(len(p) - (len(h.ids) if h else 0) for p, h in zip(prompts, hits))
        start = width - block
        if start <= 0:
            return 0
        import torch

        like = next(h for h in hits if h)
        # rows copying the same stored entry over the same columns take ONE copy per layer
        # (the shared prefix of a call: every row), not one per row (a kernel each on a GPU)
        copies: dict[tuple[int, int], list[int]] = {}
        for row, (prompt, hit) in enumerate(zip(prompts, hits)):
            n_copy = len(prompt) - block  # positions of this row left of the block
            if n_copy > 0:
                copies.setdefault((id(hit), n_copy), []).append(row)
        entries = {id(h): h for h in hits if h}
        plan = [
            (entries[key], n, torch.tensor(rows, dtype=torch.long, device=self.device))
            for (key, n), rows in copies.items()
        ]
        for layer_index, layer in enumerate(layers):
            k, v = like.keys[layer_index], like.values[layer_index]
            layer.allocate(len(prompts), k.shape[0::2], v.shape[0::2], k)
            for hit, n_copy, rows in plan:
                cols = slice(start - n_copy, start)  # right-aligned: col = width - len(prompt)
                layer._key_buffer[rows, :, cols] = hit.keys[layer_index][None, :, :n_copy]
                layer._value_buffer[rows, :, cols] = hit.values[layer_index][None, :, :n_copy]
            layer.length = start
            layer._set_views()
        self.stats.reused_prompt_tokens += sum(max(0, len(p) - block) for p in prompts)
        return start

    def _keep_rows(self, store, layers, which, rows, prompts, out, width: int) -> None:
        """Store K/V of ``prompt + ids[:-1]`` (the last sampled id was never fed) of the
        batch rows where ``which`` is True."""
        for b in which.nonzero().flatten().tolist():
            row = int(rows[b])
            n = int(out.count[row])
            if not n:
                continue
            first, end = width - len(prompts[row]), width + n - 1
            ids = tuple(prompts[row]) + tuple(out.ids[row, : n - 1].tolist())
            store.add(_PrefixEntry.copied(ids, layers, self._physical_row(b), first, end))

    def _end_table(self, vocab: int, device):
        """``(vocab,)`` bool: True at the EOS ids (looked up by the sampled ids)."""
        key = ("end", vocab, str(device))
        table = self._tables.get(key)
        if table is None:
            import torch

            table = torch.zeros(vocab, dtype=torch.bool, device=device)
            ends = [i for i in self.eos_token_ids if 0 <= i < vocab]
            table[ends] = True
            self._tables[key] = table
        return table

    def _stop_table(self, stops: list[str], vocab: int, device):
        """``(vocab,)`` bool: :meth:`_may_complete_stop` for every id (False: the id
        cannot complete any of ``stops``, so its row's tail is not decoded)."""
        key = ("stop", tuple(stops), vocab, str(device))
        table = self._tables.get(key)
        if table is None:
            import torch

            may_stop = self._may_complete_stop(stops)
            table = torch.tensor([may_stop(i) for i in range(vocab)], dtype=torch.bool)
            table = self._tables[key] = table.to(device)
        return table

    def _finish(self, token_ids, logprobs, reasons) -> list[Generation]:
        return finished_generations(self.tokenizer, token_ids, logprobs, reasons)


def _always(token_id: int) -> bool:
    return True


def _member_or_out_of_range(hits: frozenset, vocab: int, token_id: int) -> bool:
    """A token the filter knows and found, or one past the tokenizer's vocabulary (the
    model's embedding may be larger): unknown, so checked."""
    return token_id in hits or token_id >= vocab


def _preallocated_layers(cache):
    """The cache's layers when ALL are preallocated full-attention layers, else None."""
    layers = getattr(cache, "layers", None)
    if not layers or any(type(layer).__name__ != "PreallocatedLayer" for layer in layers):
        return None
    return layers


def accepts_logits_to_keep(model) -> bool:
    """Whether ``model.forward`` (or the model a PEFT wrapper holds) takes ``logits_to_keep``."""
    target = model.get_base_model() if hasattr(model, "get_base_model") else model
    try:
        return "logits_to_keep" in inspect.signature(target.forward).parameters
    except (TypeError, ValueError):
        return False
