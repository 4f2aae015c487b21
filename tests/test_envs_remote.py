"""Environments over HTTP: `ragen serve-env` + the `remote` env, with real local servers
(in a thread, or a `ragen serve-env` process killed mid-rollout), concurrency, failures."""

from __future__ import annotations

import json
import logging
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from fakes import short_train_args

from ragen.agent.env_manager import EnvStateManager
from ragen.agent.policies import OraclePolicy
from ragen.agent.rollout import RolloutConfig, run_rollout
from ragen.envs import Env, make, make_info, register
from ragen.envs.checker import check_env
from ragen.envs.serving.http_server import EnvServer

ROOT = Path(__file__).resolve().parents[1]


class SlowCounter(Env):
    """Say 'inc' three times; every step takes ``delay`` seconds (a slow service)."""

    description = "test: a slow counter"

    def __init__(self, delay: float = 0.2) -> None:
        super().__init__()
        self.delay, self.count = float(delay), 0

    def _reset(self, seed: int) -> None:
        self.count = 0

    def _step(self, action: str):
        time.sleep(self.delay)
        if action != "inc":
            return self.render(), 0.0, False, False, make_info(False, False, False)
        self.count += 1
        done = self.count >= 3
        return self.render(), float(done), done, False, make_info(True, True, done)

    @property
    def instructions(self) -> str:
        return "Say inc three times."

    @property
    def action_names(self) -> list[str]:
        return ["inc"]

    def render(self, mode: str = "text") -> str:
        if mode != "text":
            raise self._unsupported_mode(mode)
        return f"count {self.count}"

    def state_key(self) -> str | None:
        return None  # every episode starts alike: split by seed range

    def oracle_action(self) -> str | None:
        return None if self.done else "inc"


@pytest.fixture
def slow_counter():
    """``test_slow_counter`` registered for one test only (the registry is process-wide)."""
    from ragen.envs import registry

    register("test_slow_counter", f"{__name__}:SlowCounter", SlowCounter.description)
    yield "test_slow_counter"
    registry._REGISTRY.pop("test_slow_counter", None)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _post(url: str, path: str, body: dict) -> dict:
    request = urllib.request.Request(
        url + path, json.dumps(body).encode(), {"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read())


def test_a_served_env_passes_the_checker_and_plays_exactly_like_the_local_one():
    with EnvServer("frozen_lake") as server:
        remote = make("remote", url=server.url)
        check_env(remote, seeds=(0, 1))
        local = make("frozen_lake")
        assert remote.instructions == local.instructions
        assert remote.action_names == local.action_names
        assert remote.fact_kinds == local.fact_kinds and remote.progress_potential_meaning
        for seed in (0, 3):
            # slippery ice: the rng_seed is forwarded, so the slips are the same
            assert remote.reset(seed, rng_seed=11) == local.reset(seed, rng_seed=11)
            assert remote.state_key() == local.state_key()
            assert (remote.render("rgb") == local.render("rgb")).all()
            for action in ["down", "right", "right", "down", "left", "up"] * 2:
                assert remote.oracle_action() == local.oracle_action()
                assert remote.state_facts() == local.state_facts()
                assert remote.predict_facts([action]) == local.predict_facts([action])
                a, b = remote.step(action), local.step(action)
                assert a[:4] == b[:4] and a[4]["success"] == b[4]["success"]
                if local.done:
                    break
        remote.close()


def test_retried_step_is_not_applied_twice_and_bad_requests_are_named():
    with EnvServer("cube2x2") as server:
        episode = _post(server.url, "/reset", {"seed": 4})["episode_id"]
        first = _post(server.url, "/step", {"episode_id": episode, "action": "U", "t": 1})
        again = _post(server.url, "/step", {"episode_id": episode, "action": "U", "t": 1})
        assert first == again
        local = make("cube2x2")
        local.reset(4)
        assert first["observation"] == local.step("U")[0]
        with pytest.raises(urllib.error.HTTPError) as err:
            _post(server.url, "/step", {"episode_id": "nope", "action": "U"})
        assert err.value.code == 404 and "unknown episode" in json.loads(err.value.read())["error"]
        with pytest.raises(urllib.error.HTTPError) as err:
            _post(server.url, "/reset", {"seed": "zero"})
        assert err.value.code == 400


def test_remote_steps_run_concurrently(slow_counter):
    """8 episodes whose steps take 0.3 s each: one turn costs about one step, not eight."""
    with EnvServer("test_slow_counter", {"delay": 0.3}) as server:
        manager = EnvStateManager("remote", {"url": server.url}, env_groups=4, group_size=2)
        config = RolloutConfig(max_turns=1, max_actions_per_turn=1, max_actions_per_trajectory=3)
        tic = time.perf_counter()
        result = run_rollout(OraclePolicy(), manager, config, [0, 1, 2, 3])
        wall = time.perf_counter() - tic
        manager.close()
    assert len(result.trajectories) == 8
    assert all(t.turns[0].info["action_is_valid"] == [True] for t in result.trajectories)
    assert wall < 0.5 * 8 * 0.3, f"the steps were serialized ({wall:.2f}s)"


def test_a_down_server_stops_before_anything_plays():
    from ragen.errors import EnvUnavailableError

    url = f"http://127.0.0.1:{_free_port()}"  # nothing listens there
    with pytest.raises(EnvUnavailableError, match=r"unavailable .*Connection refused"):
        EnvStateManager("remote", {"url": url, "retries": 0}, env_groups=2, group_size=2)


def test_a_slow_server_times_out_into_a_truncation(caplog, slow_counter):
    with EnvServer("test_slow_counter", {"delay": 1.0}) as server:
        env = make("remote", url=server.url, timeout=0.2)
        env.reset(0)
        tic = time.perf_counter()
        with caplog.at_level(logging.WARNING, logger="ragen.envs.serving.remote"):
            obs, reward, terminated, truncated, info = env.step("inc")
        assert time.perf_counter() - tic < 0.9
    assert truncated and not terminated and reward == 0.0 and obs == "count 0"
    assert "no reply within timeout=0.2s" in info["remote_error"] == env.error
    assert "ends truncated at step" in caplog.text


class _GarbageHandler(BaseHTTPRequestHandler):
    step_body = b""

    def do_POST(self):  # noqa: N802
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if self.path == "/reset":
            body = json.dumps({"episode_id": "e", "observation": "start"}).encode()
        else:
            body = self.step_body
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.mark.parametrize(
    "body, reason",
    [
        (b"<html>oops</html>", "not JSON"),
        (b"[1, 2]", "not a JSON object"),
        (json.dumps({"observation": 3}).encode(), "'observation' is not a string"),
        (
            json.dumps(
                {"observation": "x", "reward": "1", "terminated": False, "truncated": False}
            ).encode(),
            "the reward is not a number",
        ),
        *[  # issue 55: NaN and 1e308 (whose sums overflow) are refused, never passed on
            (
                json.dumps(
                    {
                        "observation": "x",
                        "reward": value,
                        "terminated": False,
                        "truncated": False,
                        "info": {},
                    }  # fmt: skip
                ).encode(),
                reason,
            )
            for value, reason in ((float("nan"), "not a finite number"), (1e308, "beyond +-1e+06"))
        ],
        (
            json.dumps(
                {"observation": "x", "reward": 0, "terminated": 0, "truncated": False, "info": {}}
            ).encode(),
            "booleans",
        ),
        (
            json.dumps(
                {
                    "observation": "x",
                    "reward": 0,
                    "terminated": False,
                    "truncated": False,
                    "info": {},
                }
            ).encode(),
            "'info' lacks",
        ),
    ],
)
def test_garbage_replies_truncate_with_the_reason(body, reason):
    handler = type("Handler", (_GarbageHandler,), {"step_body": body})
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        env = make("remote", url=f"http://127.0.0.1:{httpd.server_address[1]}")
        assert env.reset(0) == "start"
        obs, _, terminated, truncated, info = env.step("up")
    finally:
        httpd.shutdown()
        httpd.server_close()
    assert truncated and not terminated and obs == "start"
    assert reason in info["remote_error"]


class _KillAfterFirstTurn(OraclePolicy):
    """The oracle, but the server process dies when the second turn is asked for."""

    def __init__(self, process: subprocess.Popen) -> None:
        super().__init__()
        self.process, self.calls = process, 0

    def act(self, requests, params):
        self.calls += 1
        if self.calls == 2:
            self.process.kill()
            self.process.wait(timeout=10)
        return super().act(requests, params)


def _start_server(*args: str) -> tuple[subprocess.Popen, str]:
    port = _free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "ragen.cli", "serve-env", *args, "--port", str(port), "--quiet"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.time() + 60
    while time.time() < deadline:
        try:
            with urllib.request.urlopen(url + "/health", timeout=1) as response:
                if json.loads(response.read())["ok"]:
                    return process, url
        except OSError:
            time.sleep(0.1)
    process.kill()
    raise AssertionError(f"server did not start: {process.stdout.read().decode()}")


def test_a_server_killed_mid_rollout_truncates_the_open_episodes(caplog):
    """With rollout.max_env_error_share=1 the cut episodes come back as truncated; with
    the default (0.25) the same rollout stops with the reason (see
    tests/test_reliability_envs.py)."""
    process, url = _start_server("cube2x2", "--set", "scramble_depth=6")
    try:
        manager = EnvStateManager("remote", {"url": url, "retries": 0}, env_groups=2, group_size=2)
        config = RolloutConfig(
            max_turns=4, max_actions_per_turn=1, max_actions_per_trajectory=4,
            max_env_error_share=1.0,
        )  # fmt: skip
        with caplog.at_level(logging.WARNING, logger="ragen.envs.serving.remote"):
            result = run_rollout(_KillAfterFirstTurn(process), manager, config, [0, 1])
    finally:
        process.kill()
        process.wait(timeout=10)
    trajectories = result.trajectories
    assert len(trajectories) == 4
    # the first turn was played on the live server; the second found it gone
    assert all(t.turns[0].info["action_is_valid"] == [True] for t in trajectories)
    assert all(t.end_reason == "env_truncated" and len(t.turns) == 2 for t in trajectories)
    assert all("cannot reach" in t.env_error for t in trajectories)
    assert result.stats["env_error_episodes"] == 4
    assert "ends truncated at step" in caplog.text


def test_train_and_eval_against_a_served_env(tiny_model_dir, tmp_path):
    from ragen.cli import main

    with EnvServer("cube2x2") as server:
        run = tmp_path / "run"
        args = [a for a in short_train_args(tiny_model_dir, run) if a != "env=sokoban"]
        assert main([*args, "env=remote", f"env.config.url={server.url}"]) == 0
        rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
        assert [r["step"] for r in rows] == [1, 2] and "val/success_rate" in rows[-1]
        # the served env never failed: no episode was cut by the client
        assert rows[-1]["rollout/env_truncation_rate"] == 0.0
        out = tmp_path / "eval"
        code = main(
            [
                "eval",
                "--model",
                str(run),
                "--env",
                "remote",
                "--env-config",
                f"url={server.url}",
                "--n",
                "2",
                "--out",
                str(out),
            ]
        )
        assert code == 0
        episodes = [
            json.loads(line) for line in (out / "trajectories.jsonl").read_text().splitlines()
        ]
        assert len(episodes) == 2
        assert server.service.health()["episodes"] > 0


def test_the_remote_env_needs_a_url():
    from ragen.errors import EnvConfigError

    with pytest.raises(EnvConfigError, match=r"env.config.url=http://HOST:PORT"):
        make("remote")
    with pytest.raises(ValueError, match="not an HTTP address"):
        make("remote", url="localhost:8765")


class _MinimalGame(BaseHTTPRequestHandler):
    """A server written without ragen (as one in another language would be): only
    /info, /reset and /step of the protocol. Guess a digit, with higher/lower hints."""

    episodes: dict = {}

    def _send(self, status: int, payload: dict) -> None:
        body = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):  # noqa: N802
        names = [str(d) for d in range(10)]
        self._send(200, {"protocol": 1, "instructions": "Guess my digit.", "action_names": names})

    def do_POST(self):  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if self.path == "/reset":
            episode = body.get("episode_id") or f"e{len(self.episodes)}"
            self.episodes[episode] = {"secret": body["seed"] * 7 % 10, "obs": "Guess."}
            self._send(200, {"episode_id": episode, "observation": "Guess.", "state_key": None})
        elif self.path == "/step":
            game, action = self.episodes[body["episode_id"]], body["action"]
            valid = action in [str(d) for d in range(10)]
            won = valid and int(action) == game["secret"]
            if valid and not won:
                game["obs"] = "higher" if int(action) < game["secret"] else "lower"
            info = {"action_is_valid": valid, "action_is_effective": valid, "success": won}
            reply = {"observation": "won" if won else game["obs"], "reward": float(won)}
            self._send(200, {**reply, "terminated": won, "truncated": False, "info": info})
        else:
            self._send(404, {"error": "not implemented"})

    def log_message(self, *args):
        pass


def test_a_minimal_server_without_ragen_is_a_full_env():
    from ragen.agent.evaluate import evaluate

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _MinimalGame)
    threading.Thread(target=httpd.serve_forever, args=(0.05,), daemon=True).start()
    url = f"http://127.0.0.1:{httpd.server_address[1]}"
    try:
        env = make("remote", url=url)
        check_env(env, seeds=(0, 1, 2))
        assert env.instructions == "Guess my digit." and env.action_names[-1] == "9"
        result = evaluate("random", "remote", n=4, max_turns=3, env_config={"url": url})
        assert result["valid_action_rate"] == 1.0 and result["env_truncation_rate"] == 0.0
    finally:
        httpd.shutdown()
        httpd.server_close()
