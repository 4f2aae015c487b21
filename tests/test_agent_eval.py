"""``ragen eval`` and ``evaluate`` with the reference policies, and its error messages."""

from __future__ import annotations

import json

import pytest
from fakes import LineEnv

from ragen.agent.evaluate import evaluate, format_table, run_evaluation
from ragen.cli import main
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
