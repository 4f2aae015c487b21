"""``ragen eval`` and ``evaluate`` with the reference policies, and its error messages."""

from __future__ import annotations

import json

import pytest
from fakes import LineEnv

from ragen.agent.cli import _run_settings
from ragen.agent.evaluate import evaluate, format_table, run_evaluation
from ragen.agent.rollout_flags import rollout_from_args
from ragen.cli import build_parser, main
from ragen.cli_utils import parse_key_values

# CLI tests use a registered env; the deterministic lake lets the oracle always win.
LAKE = ["--env", "frozen_lake", "--env-config", "p=1.0", "size=4"]


def test_eval_cli_oracle_writes_results(tmp_path, capsys):
    out = tmp_path / "eval"
    argv = ["eval", "--model", "oracle", "--n", "6", "--group-size", "2", "--max-turns", "8"]
    assert main([*argv, "--out", str(out), *LAKE]) == 0
    printed = capsys.readouterr().out
    assert "success rate" in printed and "100.0%" in printed and "pass@k (2)" in printed
    lines = (out / "trajectories.jsonl").read_text().splitlines()
    assert len(lines) == 6
    episode = json.loads(lines[0])
    turn = episode["turns"][0]
    for key in ("observation", "response", "thought", "actions", "executed_actions", "reward"):
        assert key in turn
    assert turn["response"].startswith("<think>") and episode["seed"] >= 10**9
    saved = json.loads((out / "metrics.json").read_text())
    assert saved["metrics"]["success_rate"] == 1.0 and saved["metrics"]["episodes"] == 6
    assert saved["settings"]["env_config"] == {"p": 1.0, "size": 4}
    assert saved["settings"]["rollout"]["temperature"] == 0.5


def test_eval_cli_random_reference_row(capsys):
    assert main(["eval", "--model", "random", "--n", "8", *LAKE]) == 0
    assert "valid action rate" in capsys.readouterr().out


@pytest.mark.parametrize("env", ["sokoban", "frozen_lake"])
def test_reference_policies_on_real_envs(env):
    import ragen.envs

    if env not in ragen.envs.names():
        pytest.skip(f"{env} not registered")
    oracle = evaluate("oracle", env, n=16, actions_per_turn=5)
    rnd = evaluate("random", env, n=16)
    assert oracle["success_rate"] > rnd["success_rate"]
    assert oracle["format_error_rate"] == 0 and oracle["valid_action_rate"] == 1.0


def test_evaluate_is_deterministic_and_chunking_keeps_ids_unique():
    a = run_evaluation("random", LineEnv, n=12, group_size=3, env_config={"slip": 0.3})
    b = run_evaluation(
        "random", LineEnv, n=12, group_size=3, env_config={"slip": 0.3}, batch_groups=2
    )
    assert a.metrics["reward_mean"] == b.metrics["reward_mean"]
    assert sorted(t.episode_id for t in b.trajectories) == list(range(12))
    assert sorted({t.group_id for t in b.trajectories}) == [0, 1, 2, 3]


def test_eval_errors_are_one_line(capsys):
    cases = [
        (["--model", "/no/such/model_dir"], "does not exist"),
        (["--model", "missing.gguf"], "GGUF file"),
        (["--model", "oracle", "--n", "5", "--group-size", "2"], "multiple of group_size"),
        (["--model", "oracle", "--env-config", "nokey"], "KEY=VALUE"),
        (["--model", "oracle", "--env-config", "bogus=1"], "has no option 'bogus'"),
        (["--model", "tinyy"], "Did you mean 'tiny'"),
        (["--model", "oracle", "--max-new-tokens", "0"], "--max-new-tokens: must be >= 1"),
    ]
    for extra, message in cases:
        rc = main(["eval", "--env", "frozen_lake", "--n", "4", *extra])
        err = capsys.readouterr().err.strip()
        assert rc == 2 and message in err and err.startswith("ragen eval: error:")
        assert "Traceback" not in err and len(err.splitlines()) == 1
    assert main(["eval", "--model", "oracle", "--env", "no_such_lake", "--n", "2"]) == 2
    assert "unknown environment" in capsys.readouterr().err


def test_unreachable_api_is_one_line(capsys):
    pytest.importorskip("ragen.engines.openai_api")
    # port 9 (discard) on loopback: nothing listens, the connection is refused at once
    argv = "eval --api-base http://127.0.0.1:9/v1 --model m --n 1 --max-turns 1".split()
    rc = main([*argv, *LAKE])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and "127.0.0.1:9" in err and len(err.splitlines()) == 1


def test_parse_key_values_and_table():
    assert parse_key_values(["a=1", "b=[8, 8]", "c=true", "d=x", "lr=1e-3", "p=1/4", "e="]) == {
        "a": 1, "b": [8, 8], "c": True, "d": "x", "lr": 0.001, "p": 0.25, "e": ""
    }  # fmt: skip
    table = format_table({"success_rate": 0.5, "group_size": 4}, "title")
    assert table.splitlines()[0] == "title" and "50.0%" in table and "pass@k (4)" in table


def test_eval_against_a_local_openai_compatible_server(tmp_path, capsys):
    pytest.importorskip("ragen.engines.openai_api")
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    requests = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802 (http.server API)
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            requests.append(body)
            # a server strips the matched stop string "</answer>"
            reply = {"choices": [{"message": {"role": "assistant",
                                              "content": "<think>t</think><answer>left"},
                                  "finish_reason": "stop"}]}  # fmt: skip
            data = json.dumps(reply).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/v1"
        out = tmp_path / "api"
        argv = ["eval", "--api-base", url, "--model", "served", "--n", "2", "--max-turns", "2"]
        rc = main([*argv, "--out", str(out), *LAKE])
    finally:
        server.shutdown()
        server.server_close()
    assert rc == 0, capsys.readouterr().err
    metrics = json.loads((out / "metrics.json").read_text())["metrics"]
    assert metrics["format_error_rate"] == 0.0 and metrics["valid_action_rate"] == 1.0
    first = requests[0]
    assert first["model"] == "served" and first["messages"][0]["role"] == "system"
    assert "</answer>" in first["stop"]


def test_eval_accepts_the_same_model_names_as_train(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("RAGEN_CACHE", str(tmp_path))  # tiny is built offline on first use
    argv = "eval --model tiny:nano --env sokoban --n 8 --max-turns 1 --max-new-tokens 8".split()
    assert main(argv) == 0
    assert "success rate" in capsys.readouterr().out
    assert (tmp_path / "models" / "tiny-nano-seed0" / "config.json").is_file()


# ---------------------------------------------------- the budget eval plays by default
def test_eval_takes_the_envs_turn_budget_and_says_so(tmp_path, capsys):
    """`ragen eval --env sokoban` plays Sokoban's own budget (its preset: 5 turns of up to
    5 actions, 10 per episode), the oracle as many actions a turn as it allows, as
    `ragen train env=sokoban` would; the table's header says the budget; results.md
    holds the table, the budget and the command."""
    out = tmp_path / "eval"
    assert (
        main(["eval", "--model", "oracle", "--env", "sokoban", "--n", "8", "--out", str(out)]) == 0
    )
    printed = capsys.readouterr().out
    assert "budget: 5 turns x up to 5 actions, at most 10 per episode; oracle plays 5" in printed
    saved = json.loads((out / "metrics.json").read_text())["settings"]
    assert saved["rollout"]["max_actions_per_turn"] == 5 and saved["actions_per_turn"] == 5
    results = (out / "results.md").read_text()
    assert "ragen eval --model oracle --env sokoban --n 8 --out" in results
    assert "budget: 5 turns x up to 5 actions" in results and "| success rate |" in results
    # the bandit is one pull: its preset says so (and the stderr line names the preset)
    assert main(["eval", "--model", "random", "--env", "bandit", "--n", "4"]) == 0
    got = capsys.readouterr()
    assert "budget: 1 turn x up to 1 action, at most 1 per episode" in got.out
    assert "env preset bandit (ragen/configs/env/bandit.yaml" in got.err
    # a flag wins over the preset
    assert (
        main(["eval", "--model", "oracle", "--env", "sokoban", "--n", "2", "--max-turns", "2"]) == 0
    )
    assert "budget: 2 turns x up to 5 actions" in capsys.readouterr().out


def test_a_model_preset_brings_its_token_budget():
    """`ragen eval --model smollm2 --env bandit`: one pull (the env's preset) of at most
    128 tokens (the model preset's), not 5 turns of 400 (read without loading it)."""
    args = build_parser().parse_args(["eval", "--model", "smollm2", "--env", "bandit"])
    model, inherited, env_config, notes = _run_settings(args)
    assert any("model preset smollm2" in note and "max_new_tokens=128" in note for note in notes)
    assert model == "smollm2" and env_config == {}
    assert inherited["max_turns"] == 1 and inherited["max_new_tokens"] == 128
    args = build_parser().parse_args(
        ["eval", "--model", "smollm2", "--env", "bandit", "--max-new-tokens", "64"]
    )
    inherited = _run_settings(args)[1]
    assert "max_new_tokens" not in inherited  # the flag wins
    assert rollout_from_args(args, inherited=inherited).max_new_tokens == 64


def test_oracle_actions_per_turn_beyond_the_budget_is_one_line(capsys):
    argv = ["eval", "--model", "oracle", "--env", "sokoban", "--n", "2", "--actions-per-turn", "6"]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert "--actions-per-turn 6 must be between 1 and the turn's budget" in err
    assert len(err.splitlines()) == 1
