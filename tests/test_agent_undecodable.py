"""A reply with a lone surrogate (or U+FFFD) is a format error of that turn, never a crash."""

from __future__ import annotations

import json

import pytest
from fakes import LineEnv, tiny_tokenizer

from ragen.agent.env_manager import EnvStateManager
from ragen.agent.evaluate import run_evaluation, write_results
from ragen.agent.policies import Policy, PolicyOutput
from ragen.agent.reasoning import clean_text, parse_response
from ragen.agent.rollout import RolloutConfig, run_rollout

BAD = "<think>hm</think><answer>\ud800right</answer>"
GOOD = "<think>go</think><answer>right</answer>"


class _OneBadEpisode(Policy):
    """A text policy: the first reply it gives holds a lone surrogate, all others are fine."""

    name = "one-bad"

    def __init__(self, tokenizer=None):
        self.tokenizer = tokenizer
        self.bad_left = 1

    def act(self, requests, params):
        outs = []
        for _ in requests:
            outs.append(PolicyOutput(text=BAD if self.bad_left else GOOD))
            self.bad_left = 0
        return outs


def test_parse_rejects_undecodable_text():
    assert not parse_response(BAD).format_ok
    assert "undecodable" in parse_response(BAD).error
    assert not parse_response(GOOD.replace("right", "ri\ufffdght")).format_ok
    assert clean_text(BAD) == BAD.replace("\ud800", "\ufffd")
    assert clean_text(GOOD) == GOOD
    clean_text(BAD).encode("utf-8")  # writable


@pytest.mark.parametrize("with_tokenizer", [False, True])
def test_surrogate_reply_is_one_format_error(tmp_path, with_tokenizer):
    tok = tiny_tokenizer("chatml") if with_tokenizer else None
    manager = EnvStateManager(LineEnv, env_groups=4, group_size=1, seed=0)
    config = RolloutConfig(max_new_tokens=48, max_model_len=4096, max_turns=3)
    result = run_rollout(_OneBadEpisode(tok), manager, config, manager.validation_seeds(4))
    turns = [turn for t in result.trajectories for turn in t.turns]
    bad = [turn for turn in turns if not turn.format_ok]
    assert len(bad) == 1 and "undecodable" in bad[0].info["format_error"]
    assert bad[0].response == BAD.replace("\ud800", "\ufffd") and bad[0].executed_actions == []
    assert all(turn.executed_actions == ["right"] for turn in turns if turn.format_ok)
    assert len(turns) > 1
    # the trajectories are written to disk and read back
    out = write_results(tmp_path, result.trajectories, {"n": 4.0}, {"model": "fake"})
    lines = (out / "trajectories.jsonl").read_text(encoding="utf-8").splitlines()
    records = [json.loads(line) for line in lines]
    assert len(records) == 4
    responses = [turn["response"] for rec in records for turn in rec["turns"]]
    assert BAD.replace("\ud800", "\ufffd") in responses


def test_eval_with_surrogate_reply_completes(tmp_path):
    result = run_evaluation(_OneBadEpisode(), LineEnv, n=3, max_turns=2, out_dir=tmp_path / "eval")
    assert 0 < result.metrics["format_error_rate"] < 1
    assert (tmp_path / "eval" / "trajectories.jsonl").is_file()
