"""SmolLM2-135M-Instruct from its GGUF file, when present (never fails CI without it).

The file comes from ``ragen models fetch-smollm2`` (default cache path) or
``$RAGEN_SMOLLM2_GGUF``; without either the test is skipped.
"""

from __future__ import annotations

import pytest

from ragen.disk_space import free_bytes
from ragen.models.cli import default_smollm2_path

GGUF = default_smollm2_path()
# the SFT model (540 MB of float32 weights) and one RL checkpoint (the weights again and
# Adam's two moments, 1.6 GB), with room to spare for what else the suite writes
NEEDS_DISK = 3_000_000_000

pytestmark = pytest.mark.skipif(
    GGUF is None, reason="SmolLM2 GGUF absent (run `ragen models fetch-smollm2`)"
)


def test_smollm2_greedy_chat_reply():
    from ragen.engines.base import SamplingParams
    from ragen.engines.hf import HFEngine
    from ragen.models import load_policy
    from ragen.models.gguf import gguf_cache_dir
    from ragen.models.loading import chat_template_kind

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


@pytest.mark.slow
@pytest.mark.parametrize("env", ["sokoban", "frozen_lake"])
def test_smollm2_sft_then_one_rl_step_on_a_grid(env, tmp_path):
    """The real model as a grid agent end to end: SFT on the solver's moves (clean
    labels, noisy states), then one RL step from that warm start, both saved as HF
    folders that load again."""
    import json

    from ragen.agent.rollout import RolloutConfig
    from ragen.cli import main
    from ragen.models import load_policy
    from ragen.sft.config import SFTConfig
    from ragen.sft.trainer import run_sft

    rollout = RolloutConfig(
        max_turns=2, max_actions_per_turn=1, context_window=0, max_new_tokens=12,
        prompt_style="compact", reasoning="no_think",
    )  # fmt: skip
    cfg = SFTConfig(
        env=env, rollout=rollout, episodes=2, epsilon=0.5, epochs=1, batch_size=4, lr=5e-5
    )
    free = free_bytes(tmp_path)
    if free is not None and free < NEEDS_DISK:  # the machine's fault, not the code's
        pytest.skip(f"{free / 1e9:.1f} GB free in {tmp_path}; this test writes ~2.2 GB at its peak")
    sft = run_sft(str(GGUF), tmp_path / "sft", cfg, log=lambda m: None, device="cpu")
    history = [json.loads(line) for line in (sft / "sft_metrics.jsonl").open()]
    assert history and all(r["loss"] > 0 for r in history)
    run = tmp_path / "rl"
    args = [
        "train", f"env={env}", "algo=drgrpo", f"model.path={sft}", "model.device=cpu",
        "rollout.env_groups=1", "rollout.group_size=2", "rollout.max_turns=2",
        "rollout.max_actions_per_turn=1", "rollout.context_window=0",
        "rollout.max_new_tokens=12", "rollout.prompt_style=compact",
        "rollout.reasoning=no_think", "algo.ppo_mini_batch_size=4",
        "trainer.total_steps=1", "trainer.val_every=0", "trainer.save_every=1",
        "trainer.console=false", "trainer.tensorboard=false", f"trainer.run_dir={run}",
    ]  # fmt: skip
    assert main(args) == 0
    (actor,) = (run / "checkpoints").glob("step_*/actor")
    model, _ = load_policy(actor, device="cpu")
    assert model.config.model_type == "llama"
