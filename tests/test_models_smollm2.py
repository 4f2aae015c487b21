"""SmolLM2-135M-Instruct from its GGUF file, when present (never fails CI without it).

The file comes from ``ragen models fetch-smollm2`` (default cache path) or
``$RAGEN_SMOLLM2_GGUF``; without either the test is skipped.
"""

from __future__ import annotations

import pytest

from ragen.models.cli import default_smollm2_path

GGUF = default_smollm2_path()

pytestmark = pytest.mark.skipif(
    GGUF is None, reason="SmolLM2 GGUF absent (run `ragen models fetch-smollm2`)"
)


def test_smollm2_greedy_chat_reply():
    from ragen.engines.base import SamplingParams
    from ragen.engines.hf import HFEngine
    from ragen.models import load_policy
    from ragen.models.loading import chat_template_kind, gguf_cache_dir

    model, tok = load_policy(GGUF, device="cpu")
    assert (gguf_cache_dir(GGUF) / "config.json").is_file()  # converted once, reused
    assert chat_template_kind(tok) == "chatml"
    assert tok.eos_token == "<|im_end|>" and tok.padding_side == "left"
    messages = [{"role": "user", "content": "What is the capital of France? Answer in one word."}]
    prompt = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    ids = tok.encode(prompt, add_special_tokens=False)
    gen = HFEngine(model, tok).generate(
        [ids], SamplingParams(temperature=0.0, max_new_tokens=12, stop_strings=[])
    )[0]
    assert gen.finish_reason in ("eos", "length") and len(gen.token_ids) > 0
    assert "Paris" in gen.text
