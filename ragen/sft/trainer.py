"""Supervised warm start on expert trajectories (``ragen sft``).

The data are oracle rollouts tokenized by the SAME context machinery as RL rollouts
(same system prompt, same per-turn user messages, same ``<think>/<answer>`` format), so
the loss mask is exactly the assistant tokens, as in RL:

    loss = - sum_{t : response_mask_t = 1} log p(x_t | x_<t) / sum_t response_mask_t

(token-mean over the whole batch). Full fine-tuning or LoRA (PEFT); the output is an
HF-format model folder that ``ragen train model=PATH`` and ``ragen eval --model PATH`` load.
"""

from __future__ import annotations

import dataclasses
import json
import math
import random
import time
from dataclasses import asdict
from pathlib import Path

import torch

from ragen import disk_space
from ragen.agent.trajectory import Trajectory
from ragen.batching import TrainingBatch, collate, micro_batches
from ragen.errors import DiskFullError, NonFiniteError, UsageError
from ragen.models import load_policy
from ragen.models.attention import training_attention
from ragen.models.finite import NONFINITE_DIR, check_finite_weights, nonfinite_loss, save_step_data
from ragen.models.hf_setup import quiet_transformers
from ragen.models.logprobs import sequence_logprobs, wanted_logits
from ragen.models.lora import LoraConfig, apply_lora
from ragen.models.memory import resolve_token_budget
from ragen.models.precision import autocast_for
from ragen.models.tiny import build_model
from ragen.models.vlm import forward_inputs, is_processor, row_images, text_tokenizer

from .config import SFTConfig
from .expert_data import (
    SFT_SEED_STEP,
    auxiliary_config,
    make_expert_data,
    training_state_success,
)

# a micro-batch holds rows of at least this share of its longest: the grids' SFT mixes
# ~110-token move samples with ~170-token auxiliary replies, and one pack of both pads
# every move to 170 (the loss is summed over tokens, so the split changes no gradient)
SFT_MIN_FILL = 0.75
#: training samples the fit check scores (``SFTConfig.fit_check``)
FIT_CHECK_SAMPLES = 256

#: the wall clock the time budget reads (a test replaces it with a fake one)
_clock = time.perf_counter

# a time budget times optimizer steps WARMUP_STEPS+1 .. BUDGET_PROBE_STEPS (the first ones
# pay one-off costs: kernel selection, CUDA context, caches) before shortening the schedule
BUDGET_WARMUP_STEPS = 5
BUDGET_PROBE_STEPS = 25


class SFTPlateau(Exception):
    """The fit check failed on a model that may be drawn again (:func:`run_sft`)."""

    def __init__(self, step: int, reply_accuracy: float):
        super().__init__(f"reply accuracy {reply_accuracy:.3f} after {step} steps")
        self.step, self.reply_accuracy = step, reply_accuracy


def sft_loss(model, batch: TrainingBatch, processor=None) -> tuple[torch.Tensor, torch.Tensor]:
    """Summed negative log-likelihood over response tokens and their count.

    batch tensors are (B, T); the LM head runs only where a response token is predicted
    (``sequence_logprobs`` with ``positions=response_mask``). A VLM's rows carry their
    pictures (``batch.images``): ``processor`` turns them into pixel inputs.
    """
    vision = {}
    if batch.images and processor is not None:  # pixels (+ Qwen2-VL's M-RoPE positions)
        dtype = next(model.parameters()).dtype
        images = row_images(batch.images)
        vision = forward_inputs(
            model, processor, batch.input_ids, batch.attention_mask, images, dtype
        )
    mask = batch.response_mask
    with training_attention(model):  # on the CPU: GQA's K/V heads read in place
        log_prob, _ = sequence_logprobs(
            model, batch.input_ids, batch.attention_mask, positions=mask, **vision
        )
    return -(log_prob * mask).sum(), mask[:, 1:].sum()


def train_sft(
    model,
    tokenizer,
    data: list[Trajectory],
    cfg: SFTConfig,
    log=print,
    heldout: list[Trajectory] | None = None,
    on_epoch=None,
    dump_dir: str | Path | None = None,
    restartable: bool = False,
) -> list[dict]:
    """Train ``model`` in place on ``data``; returns per-step metrics.

    ``restartable``: a failed fit check (``cfg.fit_check``) raises :class:`SFTPlateau`
    (the caller draws the model again); otherwise it is logged and training goes on.

    ``heldout``: expert samples never trained on; after every epoch their loss and
    accuracy (:func:`sft_fit`) join that epoch's last record as ``heldout_*``, and the
    training data's own are measured on a same-sized slice of it (``train_*``), so a
    warm start that does not fit what it was taught shows it. ``on_epoch(model,
    tokenizer, epoch)``
    may return more metrics for that record (say, success on the SFT states).

    A NaN/inf loss or gradient stops training before that optimizer step with a
    :class:`~ragen.errors.NonFiniteError`; with ``dump_dir`` the step's batch is saved in
    ``dump_dir/nonfinite/step_N`` first (``ragen.models.finite``).
    """
    device = next(model.parameters()).device
    processor = tokenizer if is_processor(tokenizer) else None  # a VLM: pixels too
    text_tok = text_tokenizer(tokenizer)
    pad_id = text_tok.pad_token_id if text_tok.pad_token_id is not None else text_tok.eos_token_id
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(
        params, lr=cfg.lr, betas=(0.9, cfg.adam_beta2), weight_decay=cfg.weight_decay
    )
    rng = random.Random(cfg.seed)
    order = list(range(len(data)))
    steps_per_epoch = math.ceil(len(data) / cfg.batch_size)
    total = steps_per_epoch * cfg.epochs
    plan = {"total": total}  # shortened once when a time budget will not fit every step
    sched = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: sft_lr_factor(s, plan["total"], cfg.warmup_frac)
    )
    autocast = autocast_for(device, cfg.bf16)
    budget = resolve_token_budget(
        model, device, cfg.micro_token_budget, "micro_token_budget", 16384
    )
    if not cfg.micro_token_budget:  # auto: say what it came to, so a rerun can pin it
        log(
            f"sft: micro-batches of at most {budget} tokens (micro_token_budget=0, auto: "
            f"from the model and the free memory; --micro-token-budget {budget} repeats "
            "this run on a machine with other free memory)"
        )
    if heldout and processor is not None:
        raise UsageError("held-out fit is measured for text models only (no pixels)")
    probe_train = rng.sample(data, min(len(data), len(heldout))) if heldout else None
    fit_rows = rng.sample(data, min(len(data), FIT_CHECK_SAMPLES)) if cfg.fit_check else None
    history = []

    def epoch_end(epoch: int) -> None:
        if not history or not (heldout or on_epoch is not None):
            return
        model.eval()
        extra: dict = {}
        if heldout:
            for name, rows in (("heldout", heldout), ("train", probe_train)):
                fit = sft_fit(model, rows, pad_id, budget)
                extra.update({f"{name}_{k}": v for k, v in fit.items()})
        if on_epoch is not None:
            extra.update(on_epoch(model, tokenizer, epoch) or {})
        history[-1].update(extra)
        log(f"sft epoch {epoch}: " + ", ".join(f"{k} {v:.4f}" for k, v in extra.items()))
        model.train()

    model.train()
    step, stopped = 0, False
    tic = _clock()
    for epoch in range(cfg.epochs):
        rng.shuffle(order)
        for start in range(0, len(order), cfg.batch_size):
            rows = [data[i] for i in order[start : start + cfg.batch_size]]
            batch = collate(rows, pad_id)
            total_tokens = float(batch.response_mask.sum())
            loss_sum, problem = 0.0, ""
            for _, mb in micro_batches(batch, range(batch.size), budget, SFT_MIN_FILL):
                with autocast:
                    nll, _ = sft_loss(model, mb.to(device), processor)
                problem = problem or nonfinite_loss(nll, "SFT loss", model)
                if problem:
                    break
                (nll / total_tokens).backward()
                loss_sum += float(nll.detach())
            grad_norm = float(torch.nn.utils.clip_grad_norm_(params, 1.0))
            if problem or not math.isfinite(grad_norm):
                raise _nonfinite_sft_error(
                    step + 1, problem or f"the gradient norm is {grad_norm}", batch, cfg, dump_dir
                )
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            sched.step()
            step += 1
            record = {
                "step": step,
                "epoch": epoch,
                "loss": loss_sum / max(total_tokens, 1.0),
                "grad_norm": grad_norm,
                "lr": sched.get_last_lr()[0],
                "elapsed_s": _clock() - tic,
            }
            history.append(record)
            if step == 1 or step % 10 == 0 or step == plan["total"]:
                log(
                    f"sft step {step}/{plan['total']} epoch {epoch} loss {record['loss']:.4f} ({record['elapsed_s']:.0f}s)"
                )
            if step == BUDGET_WARMUP_STEPS:
                probe_tic = _clock()
            if cfg.max_seconds is not None and step == BUDGET_PROBE_STEPS:
                spent = _clock() - tic
                per_step = (_clock() - probe_tic) / (step - BUDGET_WARMUP_STEPS)
                fits = step + int(max(0.0, cfg.max_seconds - spent) / per_step)
                if fits < plan["total"]:
                    log(f"sft: {per_step:.2f}s per step, {fits} of {plan['total']} steps fit")
                    plan["total"] = fits
            if fit_rows and step == max(1, math.ceil(cfg.fit_check * plan["total"])):
                model.eval()
                accuracy = sft_fit(model, fit_rows, pad_id, budget)["reply_accuracy"]
                model.train()
                record["fit_check_reply_accuracy"] = accuracy
                if accuracy < cfg.fit_min_reply_accuracy:
                    if restartable:
                        raise SFTPlateau(step, accuracy)
                    log(f"sft: fit check failed (reply accuracy {accuracy:.3f} < "
                        f"{cfg.fit_min_reply_accuracy}); training on")  # fmt: skip
            if cfg.stop_at_success and step % cfg.success_check_every == 0:
                model.eval()
                solved = training_state_success(
                    model, tokenizer, cfg.env, cfg.env_config, cfg.rollout, cfg.seed,
                    SFT_SEED_STEP, cfg.success_check_episodes, cfg.success_check_temperature,
                )  # fmt: skip
                model.train()
                record["sft_state_success"] = solved
                log(f"sft step {step}: solves {solved:.1%} of {cfg.success_check_episodes} "
                    f"SFT states (stops at {cfg.stop_at_success:.0%})")  # fmt: skip
                if solved >= cfg.stop_at_success:
                    record["stopped_at_success"] = solved
                    stopped = True
            if step >= plan["total"] or stopped:
                break
        if stopped:
            log(f"sft: stopped at step {step} of {plan['total']} (epoch {epoch}): the model "
                f"solves {record['stopped_at_success']:.1%} of its SFT states")  # fmt: skip
            epoch_end(epoch)
            break
        if step >= plan["total"] and epoch + 1 < cfg.epochs:
            log(f"sft: time budget reached in epoch {epoch}")
            epoch_end(epoch)
            break
        epoch_end(epoch)
    model.eval()
    return history


def sft_lr_factor(step: int, total: int, warmup: float = 0.0) -> float:
    """The learning-rate multiplier at optimizer step ``step`` of ``total``: linear from
    0 over the first ``warmup`` fraction, then cosine from 1 down to 0.1 (a floor, so the
    last epochs still move; cosine decay keeps them from undoing the format the first
    ones learned)."""
    ramp = int(warmup * total)
    if step < ramp:
        return (step + 1) / ramp
    done = min(step - ramp, total - ramp) / max(total - ramp, 1)
    return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * done))


@torch.no_grad()
def sft_fit(model, rows: list[Trajectory], pad_id: int, token_budget: int) -> dict[str, float]:
    """How well ``model`` fits expert samples ``rows``: ``loss`` (mean NLL per assistant
    token), ``token_accuracy`` (assistant tokens that are the argmax) and ``reply_accuracy``
    (samples whose every assistant token is the argmax: greedy decoding reproduces the
    expert's reply, its action included)."""
    device = next(model.parameters()).device
    nll = tokens = correct = replies = exact = 0.0
    for start in range(0, len(rows), 64):
        batch = collate(rows[start : start + 64], pad_id)
        for _, mb in micro_batches(batch, range(batch.size), token_budget):
            mb = mb.to(device)
            want = mb.response_mask[:, 1:].bool()  # (B, T-1)
            logits, targets = wanted_logits(
                model, mb.input_ids, mb.attention_mask, mb.response_mask
            )  # (N, V), (N,)
            nll -= float(torch.log_softmax(logits, -1).gather(1, targets[:, None]).sum())
            hit = logits.argmax(-1) == targets  # (N,)
            hits = torch.zeros_like(want).masked_scatter(want, hit)  # (B, T-1)
            tokens += float(want.sum())
            correct += float(hit.sum())
            replies += mb.size
            exact += float((hits | ~want).all(1).sum())
    return {
        "loss": nll / max(tokens, 1.0),
        "token_accuracy": correct / max(tokens, 1.0),
        "reply_accuracy": exact / max(replies, 1.0),
    }


def _nonfinite_sft_error(
    step: int, what: str, batch: TrainingBatch, cfg: SFTConfig, dump_dir: str | Path | None
) -> NonFiniteError:
    """Save SFT step ``step``'s batch (when ``dump_dir`` is given); the one-line error."""
    saved = ""
    if dump_dir is not None:
        folder = Path(dump_dir) / NONFINITE_DIR / f"step_{step:06d}"
        tensors = {k: getattr(batch, k) for k in ("input_ids", "attention_mask", "response_mask")}
        save_step_data(folder, tensors, {"step": step, "what": what, "lr": cfg.lr})
        saved = f"; the step's batch is saved in {folder} for inspection"
    return NonFiniteError(
        f"sft step {step}: {what}, so training stops before that optimizer step and no "
        f"model is saved{saved}. Fix: lower --lr (now {cfg.lr:g})"
    )


def run_sft(
    base_model: str, out_dir: str | Path, cfg: SFTConfig, log=print, on_epoch=None, device=None
) -> Path:
    """Generate expert data, fine-tune ``base_model`` and save the result to ``out_dir``.

    ``on_epoch(model, tokenizer, epoch) -> dict`` adds metrics after every epoch
    (:func:`train_sft`);
    ``device``: where to train (default: ``ragen.models.loading.pick_device``'s choice).
    """
    cfg.validate()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    model, tokenizer = load_policy(base_model, device=device, dtype=torch.float32)
    # the saved model is as big as the one loaded (a LoRA run saves it merged, plus its
    # small adapter): find out now, not after the training, that it cannot be written
    needed = disk_space.state_bytes(model) + disk_space.SMALL_FILES
    disk_space.require_free(out, needed, "the SFT model", _NO_ROOM_FIX)
    torch.manual_seed(cfg.seed)
    log(f"generating {cfg.episodes} expert episodes on {cfg.env} (epsilon={cfg.epsilon})")
    data = make_expert_data(tokenizer, cfg)
    if cfg.aux_reasoning and cfg.aux_episodes:
        aux = make_expert_data(tokenizer, auxiliary_config(cfg))
        log(f"auxiliary data ({cfg.aux_reasoning}): {len(aux)} samples")
        data = data + aux
    success = sum(t.success for t in data) / len(data)
    log(
        f"expert data: {len(data)} samples, expert success {success:.2%}, "
        f"{sum(t.num_response_tokens for t in data)} assistant tokens"
    )
    if cfg.lora_rank > 0:
        # the same adapter layout as LoRA in RL (model.lora.*), so an SFT adapter and an
        # RL run agree on which modules carry adapters
        model = apply_lora(model, LoraConfig(rank=cfg.lora_rank, alpha=cfg.lora_alpha))
    heldout = make_expert_data(tokenizer, cfg, "heldout") if cfg.heldout_episodes else None
    tiny = _tiny_info(base_model) if cfg.fit_check and cfg.lora_rank == 0 else None
    restarts: list[dict] = []
    while True:
        try:
            history = train_sft(
                model, tokenizer, data, cfg, log=log, heldout=heldout, on_epoch=on_epoch,
                dump_dir=out, restartable=tiny is not None and len(restarts) < cfg.fit_restarts,
            )  # fmt: skip
            break
        except SFTPlateau as plateau:
            # a from-scratch model stuck on the plateau: the same data, a new init seed
            init_seed = tiny["seed"] + 1000 * (len(restarts) + 1)
            restarts.append({"step": plateau.step, "reply_accuracy": plateau.reply_accuracy,
                             "next_init_seed": init_seed})  # fmt: skip
            log(f"sft: fit check failed ({plateau}); restart {len(restarts)} of "
                f"{cfg.fit_restarts} from a new init (seed {init_seed})")  # fmt: skip
            model = _redrawn_tiny(model, tokenizer, tiny, init_seed)
    if restarts:
        history[0]["restarts"] = restarts
    history = _extra_epochs_if_unfit(
        model, tokenizer, data, cfg, history, log=log, heldout=heldout, on_epoch=on_epoch,
        dump_dir=out,
    )  # fmt: skip

    check_finite_weights(  # never write a model that would "evaluate" as garbage
        model, f"refusing to save the SFT model to {out}", f"lower --lr (now {cfg.lr:g})"
    )
    if cfg.lora_rank > 0:
        with quiet_transformers():  # the adapter alone, for `ragen sft merge`
            model.save_pretrained(out / "adapter")
        model = model.merge_and_unload()
    try:
        with quiet_transformers():
            model.save_pretrained(out, safe_serialization=True)
            tokenizer.save_pretrained(out)
    except Exception as err:
        if not disk_space.is_disk_full(err, out, needed):
            raise
        for partial in out.glob("model*.safetensors*"):  # never leave weights that load wrong
            partial.unlink()
        free = disk_space.mb(disk_space.free_bytes(out) or 0)
        raise DiskFullError(
            f"disk full while saving the SFT model to {out} (needed ~"
            f"{disk_space.mb(needed)}, {free} free): the trained weights were not written. "
            f"Fix: {_NO_ROOM_FIX}"
        ) from None
    (out / "sft_config.json").write_text(
        json.dumps({"base_model": base_model, **asdict(cfg)}, indent=2)
    )
    with open(out / "sft_metrics.jsonl", "w") as f:
        for rec in history:
            f.write(json.dumps(rec) + "\n")
    log(f"saved SFT model to {out}")
    return out


def _extra_epochs_if_unfit(
    model, tokenizer, data: list[Trajectory], cfg: SFTConfig, history: list[dict], log, **train_kw
) -> list[dict]:
    """``cfg.end_fit_min_reply_accuracy``: when the last epoch's training reply accuracy
    is below it, ``cfg.end_fit_extra_epochs`` more epochs on ``data``, each from a fresh
    optimizer and a one-epoch schedule (the same lr, warm-up and data-order seed).

    Returns ``history`` with the extra epochs' records appended (their steps, epochs and
    seconds continue the run's; each marked ``extra_epoch``) and, when they ran, what
    started them in ``history[0]["extra_epochs"]``. A run at or above the floor, or one
    stopped at its success target (a warm start chosen on purpose), is returned as it is.
    """
    floor = cfg.end_fit_min_reply_accuracy
    if not floor or any("stopped_at_success" in rec for rec in history):
        return history
    accuracy = next(
        (rec["train_reply_accuracy"] for rec in reversed(history) if "train_reply_accuracy" in rec),
        None,
    )
    if accuracy is None or accuracy >= floor:
        return history
    log(f"sft: training reply accuracy {accuracy:.3f} < {floor} after epoch "
        f"{history[-1]['epoch']}: the model is still on the loss plateau; "
        f"{cfg.end_fit_extra_epochs} more epoch(s)")  # fmt: skip
    history[0]["extra_epochs"] = {
        "after_step": history[-1]["step"],
        "train_reply_accuracy": accuracy,
        "epochs": cfg.end_fit_extra_epochs,
    }
    one_epoch = dataclasses.replace(cfg, epochs=1, fit_check=0.0, max_seconds=None)
    for extra in range(1, cfg.end_fit_extra_epochs + 1):
        last = history[-1]
        more = train_sft(model, tokenizer, data, one_epoch, log=log, **train_kw)
        for rec in more:
            rec["step"] += last["step"]
            rec["epoch"] += last["epoch"] + 1
            rec["elapsed_s"] += last["elapsed_s"]
            rec["extra_epoch"] = extra
        history = history + more
    return history


_NO_ROOM_FIX = "free space on that disk, or write the model elsewhere (--out), and run again"


def _tiny_info(base_model: str) -> dict | None:
    """The ``ragen_tiny.json`` of a from-scratch tiny model folder (size, seed, chat
    format), or None for any other model: only those may be drawn again."""
    path = Path(base_model) / "ragen_tiny.json"
    return json.loads(path.read_text()) if path.is_file() else None


def _redrawn_tiny(model, tokenizer, info: dict, seed: int):
    """A fresh random init of the tiny model ``model`` is (same size, tokenizer and
    chat format; init seed ``seed``), on ``model``'s device."""
    device = next(model.parameters()).device
    fresh = build_model(
        info["size"], tokenizer, seed=seed, chat_format=info.get("chat_format", "chatml")
    )
    return fresh.to(device=device, dtype=torch.float32)
