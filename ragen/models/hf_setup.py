"""What every transformers load and save here shares: quiet logs, a tokenizer that pads
on the left, and activation checkpointing by the installed version's name.

Its own module so that the loaders of each kind of model (``loading``, ``tiny``,
``tiny_vlm``, ``vlm``) can use it without importing each other.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from ragen.errors import UsageError

__all__ = ["quiet_transformers", "prepare_tokenizer", "enable_activation_checkpointing"]


@contextlib.contextmanager
def quiet_transformers(progress_bars: bool = False) -> Iterator[None]:
    """Silence transformers' load reports and warnings (and, unless ``progress_bars``,
    its progress bars) for a local load or save; restores both afterwards.

    A 1M-parameter model loads in milliseconds: a "Loading weights" bar per load and a
    LOAD REPORT for an expected new head only bury the training log. Hub downloads keep
    their bars (``progress_bars=True``): those take seconds and are worth watching.
    """
    from transformers.utils import logging as hf_logging

    verbosity = hf_logging.get_verbosity()
    bars = hf_logging.is_progress_bar_enabled()
    hf_logging.set_verbosity_error()
    if not progress_bars:
        hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        hf_logging.set_verbosity(verbosity)
        if bars and not progress_bars:
            hf_logging.enable_progress_bar()


def prepare_tokenizer(tokenizer):
    """Give ``tokenizer`` a pad token (eos, else unk) and left padding; returns it."""
    if tokenizer.pad_token is None:
        fallback = tokenizer.eos_token or tokenizer.unk_token
        if fallback is None:
            raise UsageError(
                "the tokenizer has no pad, eos or unk token; set tokenizer.pad_token first"
            )
        tokenizer.pad_token = fallback
    tokenizer.padding_side = "left"
    return tokenizer


def enable_activation_checkpointing(model) -> None:
    """Turn on activation (gradient) checkpointing: ``activation_checkpointing_enable``
    where the installed transformers has it (5.24 renamed it; the old name warns and goes
    in v6), else ``gradient_checkpointing_enable``."""
    enable = getattr(model, "activation_checkpointing_enable", None)
    (enable or model.gradient_checkpointing_enable)()


def sync_special_ids(model, tokenizer) -> None:
    """Make ``generation_config`` know the pad id and the tokenizer's eos (GGUF often lacks them)."""
    gen = getattr(model, "generation_config", None)
    if gen is None:
        return
    if gen.pad_token_id is None:
        gen.pad_token_id = tokenizer.pad_token_id
    eos = gen.eos_token_id
    eos_ids = [] if eos is None else [eos] if isinstance(eos, int) else list(eos)
    if tokenizer.eos_token_id is not None and tokenizer.eos_token_id not in eos_ids:
        eos_ids.insert(0, tokenizer.eos_token_id)
    if eos_ids:
        gen.eos_token_id = eos_ids if len(eos_ids) > 1 else eos_ids[0]
