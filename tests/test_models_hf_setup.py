"""Activation checkpointing by the installed transformers' own name, with no warning."""

import warnings

import torch

from ragen.models.hf_setup import enable_activation_checkpointing


def test_checkpointing_turns_on_without_a_deprecation_warning(tiny_model_dir):
    from ragen.models import load_policy

    model, _ = load_policy(tiny_model_dir, device="cpu", dtype=torch.float32)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        enable_activation_checkpointing(model)
    assert not [w for w in caught if issubclass(w.category, FutureWarning)]
    assert any(getattr(m, "gradient_checkpointing", False) for m in model.modules())


def test_a_model_with_only_the_old_name_gets_it():
    calls = []

    class Old:
        def gradient_checkpointing_enable(self):
            calls.append("old")

    enable_activation_checkpointing(Old())
    assert calls == ["old"]
