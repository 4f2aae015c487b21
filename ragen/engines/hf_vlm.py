"""Generation with pixel inputs: a token engine over a transformers vision-language model.

    engine = HFVLMEngine(model, processor)
    gens = engine.generate(prompt_ids, SamplingParams(...), images=[[img0, img1], [img0]])

``prompt_ids[i]`` are the processor's ids (each image entry already expanded, see
``ragen.agent.visual_context``) and ``images[i]`` the pictures of row i, in the order
of their entries. One batched loop for all rows: left padding with mask-derived
position ids, ONE prefill with the pixel inputs of every picture in the batch
(``ragen.models.vlm.pixel_inputs``, the same function the trainer uses), then one
token per step from a KV cache (the pictures are in the cache after the prefill).
Position ids come from ``ragen.models.vlm.positions_for`` (1-D, or Qwen2-VL's 3-D
M-RoPE positions) and each decode step continues at the row's largest position + 1.

Sampling, log-probs, stopping and the returned :class:`~ragen.engines.base.Generation`
follow ``HFEngine`` exactly (``sample_next_token``: logp under the temperature-scaled
distribution before top-k / top-p; EOS ids kept; a stop string ends the row at the
token completing it). One VLM-specific rule: image ids are never sampled (their logit
is set to -inf before the draw) because an image id without a picture would break
the next forward pass; the reported log-prob is still that of the unmasked
distribution, the quantity the trainer recomputes. Finished rows stay in the batch
(no compaction, no prefix reuse): a VLM rollout's cost is the prefill of its pictures
and these tiny models run a handful of turns.
"""

from __future__ import annotations

from ragen.models.kv_cache import cache_arg
from ragen.models.vlm import (
    image_token_id,
    is_processor,
    next_positions,
    pixel_inputs,
    positions_for,
    row_images,
    step_positions,
    text_tokenizer,
)

from .base import Generation, SamplingParams
from .compiled import make_hf_engine
from .draws import Draws
from .hf import (
    GenerationStats,
    accepts_logits_to_keep,
    check_prompts,
    check_sampling_params,
    default_eos_ids,
    finished_generations,
    left_padded_batch,
    model_device,
    new_token_budget,
    sample_next_token,
    timed_eval_call,
)


class HFVLMEngine:
    """Token engine over an image-text-to-text model and its processor.

    Same interface as ``HFEngine`` (``generate``, ``eos_token_ids``, ``max_positions``,
    ``stats``) plus ``images=`` on ``generate``.
    """

    def __init__(self, model, processor, device=None, eos_token_ids: list[int] | None = None):
        import torch

        self.model, self.processor = model, processor
        self.tokenizer = text_tokenizer(processor)
        self.device = torch.device(device) if device is not None else model_device(model)
        self.eos_token_ids = (
            sorted(set(eos_token_ids))
            if eos_token_ids is not None
            else default_eos_ids(model, self.tokenizer)
        )
        pad = self.tokenizer.pad_token_id
        self.pad_token_id = int(pad) if pad is not None else (self.eos_token_ids or [0])[0]
        self.image_token_id = image_token_id(processor)
        base = model.get_base_model() if hasattr(model, "get_base_model") else model
        text_config = base.config.get_text_config()
        self.max_positions = getattr(text_config, "max_position_embeddings", None)
        self.vocab_size = model.get_input_embeddings().num_embeddings
        self.stats = GenerationStats()
        self._last_logits_only = {"logits_to_keep": 1} if accepts_logits_to_keep(model) else {}

    def reset_stats(self) -> None:
        self.stats.reset()

    def clear_prefix_cache(self) -> None:
        """No prefix store here (kept for the ``HFEngine`` interface)."""

    def generate(
        self, prompts: list[list[int]], params: SamplingParams, images: list[list] | None = None
    ) -> list[Generation]:
        """Sample a continuation for every prompt (with its pictures) in ONE batched loop."""
        check_sampling_params(params)
        if not prompts:
            return []
        images = images if images is not None else [[] for _ in prompts]
        if len(images) != len(prompts):
            raise ValueError(f"got {len(images)} image lists for {len(prompts)} prompts")
        check_prompts(prompts, self.vocab_size)
        for i, (p, pictures) in enumerate(zip(prompts, images)):
            if pictures and self.image_token_id not in p:
                raise ValueError(f"prompt {i} has pictures but no image ids")
        return timed_eval_call(
            self.model, self.stats, prompts, lambda: self._generate(prompts, images, params)
        )

    def _generate(self, prompts, images, params: SamplingParams) -> list[Generation]:
        import torch
        from transformers import DynamicCache

        device, batch = self.device, len(prompts)
        width = max(len(p) for p in prompts)
        max_new = new_token_budget(width, params.max_new_tokens, self.max_positions)
        token_ids: list[list[int]] = [[] for _ in range(batch)]
        logprobs: list[list[float]] = [[] for _ in range(batch)]
        reasons = ["length"] * batch
        if max_new == 0:
            return self._finish(token_ids, logprobs, reasons)

        input_ids, attention, _, _ = left_padded_batch(prompts, self.pad_token_id, device)
        dtype = next(self.model.parameters()).dtype
        vision = pixel_inputs(self.processor, row_images(images), device, dtype)
        # (B, W) mask-counted positions, or Qwen2-VL's (3, B, W) M-RoPE ones: the same
        # function the trainer's forward passes use
        positions = positions_for(self.model, input_ids, attention, vision)
        next_position = next_positions(positions)

        draws = Draws(params, batch, device)  # the call's generator, or a stream per row
        stops = list(params.stop_strings or [])
        window = 4 * max((len(s) for s in stops), default=0) + 2
        eos = set(self.eos_token_ids)
        cache = DynamicCache()
        out = self.model(
            input_ids=input_ids,
            attention_mask=attention,
            position_ids=positions,
            **cache_arg(self.model, cache),
            use_cache=True,
            **self._last_logits_only,
            **vision,
        )
        alive = [True] * batch
        for step in range(max_new):
            logits = out.logits[:, -1, :].float()
            uniform = draws.uniform(range(batch), step)
            ids, logps = _sample_without_images(logits, params, uniform, self.image_token_id)
            ids_list, logp_list = ids.tolist(), logps.tolist()
            for row in range(batch):
                if not alive[row]:
                    continue
                token_ids[row].append(ids_list[row])
                logprobs[row].append(logp_list[row])
                if ids_list[row] in eos:
                    reasons[row], alive[row] = "eos", False
            if stops:
                check = [row for row in range(batch) if alive[row]]
                tails = self.tokenizer.batch_decode(
                    [token_ids[row][-window:] for row in check],
                    skip_special_tokens=False,
                    clean_up_tokenization_spaces=False,
                )
                for row, tail in zip(check, tails):
                    if any(s in tail for s in stops):
                        reasons[row], alive[row] = "stop", False
            if step == max_new - 1 or not any(alive):
                break
            attention = torch.cat([attention, attention.new_ones((batch, 1))], dim=-1)
            out = self.model(
                input_ids=ids.unsqueeze(-1),
                attention_mask=attention,
                position_ids=step_positions(positions, next_position),
                **cache_arg(self.model, cache),
                use_cache=True,
            )
            next_position = next_position + 1
        return self._finish(token_ids, logprobs, reasons)

    def _finish(self, token_ids, logprobs, reasons) -> list[Generation]:
        return finished_generations(self.tokenizer, token_ids, logprobs, reasons)


def _sample_without_images(logits, params: SamplingParams, uniform, image_id: int):
    """``sample_next_token`` that never draws ``image_id``; logp of the unmasked logits."""
    import torch

    scale = params.temperature if params.temperature > 0 else 1.0
    logp_all = torch.log_softmax(logits / scale, dim=-1)
    masked = logits.clone()
    masked[:, image_id] = float("-inf")
    ids, _ = sample_next_token(
        masked, params.temperature, params.top_p, params.top_k, uniform=uniform
    )
    return ids, logp_all.gather(-1, ids.unsqueeze(-1)).squeeze(-1)


def engine_for(model, tokenizer_or_processor, engine: str = "static", **kwargs):
    """The token engine for ``model``: :class:`HFVLMEngine` when it comes with a
    multimodal processor (``load_policy`` of a VLM), else the text engine named by
    ``engine`` (``model.engine``: eager | static | compiled, ``ragen.engines.compiled``)."""
    if is_processor(tokenizer_or_processor):
        return HFVLMEngine(model, tokenizer_or_processor, **kwargs)

    return make_hf_engine(model, tokenizer_or_processor, engine, **kwargs)
