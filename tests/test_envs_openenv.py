"""OpenEnv both ways, with real local servers: ragen envs served to openenv-core's own
client (and by `ragen serve-env --protocol openenv`), and any OpenEnv server trained on
as `env=openenv` (a native one with structured actions, and a served ragen env)."""

from __future__ import annotations

import copy
import json
import logging
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

pytest.importorskip(
    "openenv.core", reason="needs openenv-core: pip install 'ragen[openenv]' (make test has it)"
)

from fakes import child_env, short_train_args  # noqa: E402
from openenv.core import GenericEnvClient  # noqa: E402
from openenv_guess import make_app  # noqa: E402

from ragen.envs import make  # noqa: E402
from ragen.envs.checker import check_env  # noqa: E402
from ragen.envs.serving.openenv_server import AppServer, OpenEnvServer  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
GUESS = {
    "action_fn": "openenv_guess:to_action",
    "observation_fn": "openenv_guess:to_text",
    "instructions": "Guess the hidden number from 1 to 8; the hints say higher or lower.",
    "action_names": [str(n) for n in range(1, 9)],
}


@pytest.fixture(scope="module")
def guess_server():
    with AppServer(make_app()) as server:
        yield server


def test_missing_package_names_the_extra(monkeypatch):
    from ragen.errors import MissingDependencyError

    monkeypatch.setitem(sys.modules, "openenv.core", None)  # import -> ImportError
    with pytest.raises(MissingDependencyError, match=r"pip install 'ragen\[openenv\]'"):
        make("openenv", url="http://127.0.0.1:1")
    with pytest.raises(MissingDependencyError, match=r"pip install 'ragen\[openenv\]'"):
        OpenEnvServer("sokoban")


def test_a_ragen_env_served_to_openenv_cores_own_client():
    with OpenEnvServer("sokoban") as server:
        schema = json.loads(urllib.request.urlopen(server.url + "/schema", timeout=10).read())
        assert schema["action"]["required"] == ["action"]
        local = make("sokoban")
        with GenericEnvClient(base_url=server.url).sync() as client:
            result = client.reset(seed=3)
            assert result.observation["text"] == local.reset(3)
            assert result.observation["instructions"] == local.instructions
            assert result.observation["action_names"] == ["up", "down", "left", "right"]
            assert client.state()["oracle_action"] == local.oracle_action()
            while not result.done:
                action = client.state()["oracle_action"]
                result = client.step({"action": action})
                obs, reward, terminated, truncated, _ = local.step(action)
                assert (result.observation["text"], result.reward) == (obs, reward)
                assert result.observation["terminated"] == terminated
            assert result.observation["info"]["success"] and result.reward > 1
            state = client.state()
            assert state["success"] and state["seed"] == 3 and state["step_count"] > 0
            # no seed given (as generic OpenEnv clients do): the server draws and reports it
            fresh = client.reset()
            assert fresh.observation["text"] == local.reset(fresh.observation["seed"])


def test_the_openenv_env_on_a_served_ragen_env_plays_exactly_like_the_local_one():
    with OpenEnvServer("frozen_lake") as server:
        remote = make("openenv", url=server.url)
        check_env(remote, seeds=(0, 1))
        local = make("frozen_lake")
        assert remote.instructions == local.instructions
        assert remote.action_names == local.action_names
        for seed in (0, 3):
            # slippery ice: the rng_seed is forwarded, so the slips are the same
            assert remote.reset(seed, rng_seed=11) == local.reset(seed, rng_seed=11)
            assert remote.state_key() == local.state_key()
            for action in ["down", "right", "right", "down", "left", "up"] * 2:
                assert remote.oracle_action() == local.oracle_action()
                a, b = remote.step(action), local.step(action)
                assert a[:4] == b[:4] and a[4]["success"] == b[4]["success"]
                if local.done:
                    break
        # the oracle's lookahead copy: a new session with the actions replayed
        remote.reset(5, rng_seed=2)
        remote.step("down")
        twin = copy.deepcopy(remote)
        assert twin.render() == remote.render() and twin.snapshot() == remote.snapshot()
        twin.close()
        remote.close()


def test_a_native_openenv_server_with_structured_actions(guess_server):
    env = make("openenv", url=guess_server.url, **GUESS)
    check_env(env, seeds=(0, 1))
    assert env.reset(7) == "Hint: Guess a number from 1 to 8.. Guesses left: 4."
    # binary search by hand: the env is the server's, the mapping the user's functions
    lo, hi, total = 1, 8, 0.0
    while not env.done:
        guess = (lo + hi) // 2
        obs, reward, terminated, truncated, info = env.step(str(guess))
        total += reward
        lo, hi = (
            (guess + 1, hi) if "higher" in obs else (lo, guess - 1) if "lower" in obs else (lo, hi)
        )
    assert terminated and not truncated and info["success"] and total == 1.0
    # an action the server's schema rejects executed nothing: an invalid action
    env.reset(7)
    before = env.snapshot()
    _, _, _, _, info = env.step("seven")
    assert not info["action_is_valid"] and "VALIDATION_ERROR" in info["reason"]
    assert env.snapshot() == before
    assert env.step("1")[0].endswith("Guesses left: 3.")
    env.close()


def test_the_action_field_comes_from_the_schema_or_is_named(guess_server):
    from ragen.errors import EnvConfigError

    env = make("openenv", url=guess_server.url)  # the action's field is an int: ambiguous
    env.reset(1)
    with pytest.raises(EnvConfigError, match=r"fields \['guess'\].*action_field=NAME"):
        env.step("3")
    env.close()
    with pytest.raises(EnvConfigError, match="action_fn=.*cannot be imported"):
        make("openenv", url=guess_server.url, action_fn="no_such_module:fn")
    with pytest.raises(EnvConfigError, match=r"env.config.url=http://HOST:PORT"):
        make("openenv")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_failures_end_episodes_not_runs(caplog):
    env = make("openenv", url=f"http://127.0.0.1:{_free_port()}", timeout=2)
    with caplog.at_level(logging.WARNING, logger="ragen.envs.adapters.openenv_client"):
        env.reset(0)
    assert env.truncated and "unavailable" in env.render() and "Connect" in env.error
    _, _, terminated, truncated, _ = env.step("up")
    assert truncated and not terminated
    assert "ends truncated at reset" in caplog.text
    # a server that goes away mid-episode: the episode ends truncated, the run goes on
    server = AppServer(make_app()).start()
    env = make("openenv", url=server.url, **GUESS)
    env.reset(0)
    server.stop()
    _, _, terminated, truncated, info = env.step("3")
    assert truncated and not terminated and info["remote_error"]
    env.close()
    # a server with one session: the second client is told how to fix it
    with AppServer(make_app(max_sessions=1)) as server:
        first = make("openenv", url=server.url, **GUESS)
        second = make("openenv", url=server.url, **GUESS)
        first.reset(0)
        second.reset(0)
        assert second.truncated and "max_concurrent_envs" in second.error
        assert not first.done
        first.close()
        second.close()


def test_train_on_an_openenv_served_environment(tiny_model_dir, tmp_path, guess_server):
    from ragen.cli import main

    run = tmp_path / "run"
    args = [a for a in short_train_args(tiny_model_dir, run) if a != "env=sokoban"]
    extra = [
        "env=openenv",
        f"env.config.url={guess_server.url}",
        "env.config.action_fn=openenv_guess:to_action",
        "env.config.observation_fn=openenv_guess:to_text",
        "env.config.action_names=[1,2,3,4,5,6,7,8]",
        "rollout.max_actions_per_turn=1",
    ]
    assert main([*args, *extra]) == 0
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2] and "val/success_rate" in rows[-1]
    assert rows[-1]["rollout/env_truncation_rate"] == 0.0  # the server never failed


def test_ragen_serve_env_protocol_openenv(tmp_path):
    """The real command: `ragen serve-env NAME --protocol openenv`, then openenv-core's
    client against it."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "ragen.cli", "serve-env", "countdown", "--protocol", "openenv"]
        + ["--port", "0", "--quiet", "--set", "max_attempts=2"],
        cwd=ROOT,
        env=child_env(ROOT),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        line = proc.stdout.readline()
        assert "over OpenEnv at http://" in line, line
        url = line.split(" at ")[1].split()[0]
        with GenericEnvClient(base_url=url).sync() as client:
            first = client.reset(seed=4)
            assert "Answers left: 2" in first.observation["text"]
            result = client.step({"action": "1 + 1"})
            assert result.observation["info"]["action_is_valid"] and not result.done
    finally:
        proc.terminate()
        proc.wait(timeout=20)
