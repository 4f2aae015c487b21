"""A real (tiny, random) model plays real environments: the trajectories are token-exact.

The strongest end-to-end check of the invariant: a forward pass of the model over a
trajectory's ``input_ids`` reproduces the generation log-probs on every sampled id, so
the ids trained on are the ids that were sampled, in the context they were sampled in.
"""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")

from fakes import LineEnv, check_token_exact  # noqa: E402

from ragen.agent.env_manager import EnvStateManager  # noqa: E402
from ragen.agent.policies import ModelPolicy, OraclePolicy  # noqa: E402
from ragen.agent.rollout import RolloutConfig, run_rollout  # noqa: E402
from ragen.cli import main  # noqa: E402


@pytest.fixture(scope="module", params=["chatml", "llama3"])
def tiny(request, tmp_path_factory):
    from ragen.models import load_policy
    from ragen.models.tiny import create_tiny

    path = create_tiny(
        tmp_path_factory.mktemp(f"tiny-{request.param}"),
        size="nano",
        seed=0,
        chat_format=request.param,
    )
    model, tok = load_policy(path, device="cpu", dtype="float32")
    return path, model, tok


class LoggingEngine:
    """Wraps an engine and records every (prompt, generation) pair."""

    def __init__(self, inner):
        self.inner, self.log = inner, []
        self.eos_token_ids = inner.eos_token_ids

    def generate(self, prompts, params):
        gens = self.inner.generate(prompts, params)
        self.log.extend(zip([list(p) for p in prompts], gens))
        return gens


def _envs():
    import ragen.envs

    names = [n for n in ("sokoban", "frozen_lake") if n in ragen.envs.names()]
    return names or [LineEnv]


@pytest.mark.parametrize("window", [None, 1])
def test_tiny_model_rollout_is_token_exact(tiny, window):
    from ragen.engines.hf import HFEngine
    from ragen.models.logprobs import token_logprobs

    _, model, tok = tiny
    engine = LoggingEngine(HFEngine(model, tok))
    cfg = RolloutConfig(
        max_turns=2,
        max_new_tokens=12,
        max_model_len=2048,
        temperature=1.0,
        seed=3,
        context_window=window,
    )
    for env in _envs():
        m = EnvStateManager(env, env_groups=2, group_size=2)
        res = run_rollout(ModelPolicy(engine, tok), m, cfg, m.seeds_for_step(0))
        assert res.stats["generated_tokens"] > 0 and res.stats["tokens_per_s"] > 0
        for t in res.trajectories:
            check_token_exact(t, engine.log)
            ids = torch.tensor([t.input_ids])
            with torch.no_grad():
                lp = token_logprobs(model, ids, temperature=1.0)[0]
            mask = torch.tensor(t.response_mask, dtype=torch.bool)
            gen = torch.tensor(t.gen_logprobs)
            assert torch.allclose(lp[mask], gen[mask], atol=2e-4), env
            if window is None:
                assert t.context_exact or t.num_turns < 2 or res.stats["context_fallbacks"]


def test_oracle_sft_samples_in_model_format(tiny):
    """Oracle rollouts tokenized with the model's tokenizer: exact chat-format samples."""
    _, _, tok = tiny
    env = _envs()[0]
    m = EnvStateManager(env, env_groups=2, group_size=1)
    res = run_rollout(
        OraclePolicy(tokenizer=tok), m, RolloutConfig(max_turns=3), m.validation_seeds()
    )
    for t in res.trajectories:
        assert t.context_exact and t.num_format_errors == 0 and t.source == "oracle"
        text = tok.decode(t.input_ids)
        for turn in t.turns:
            assert turn.response in text and turn.prompt in text


def test_eval_cli_with_tiny_model(tiny, tmp_path, capsys):
    path, _, _ = tiny
    out = tmp_path / "ev"
    argv = "--env frozen_lake --n 4 --group-size 2 --max-turns 2 --max-new-tokens 12".split()
    rc = main(["eval", "--model", str(path), *argv, "--out", str(out)])
    assert rc == 0
    printed = capsys.readouterr().out
    assert "generated tokens/s" in printed and "response length (tokens)" in printed
    metrics = json.loads((out / "metrics.json").read_text())["metrics"]
    assert metrics["tokens_per_s"] > 0 and metrics["episodes"] == 4
    assert len((out / "trajectories.jsonl").read_text().splitlines()) == 4
