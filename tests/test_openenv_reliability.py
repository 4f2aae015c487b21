"""Issue 55's OpenEnv items replayed (docs/RELIABILITY.md "The OpenEnv server and
client, sizes, disks and the last config keys"): the server gets ``ragen serve-env``'s protections (token, body limit, read
timeout, bounded sessions with an idle timeout, one-line errors), and ``env=openenv``
fails clearly on a server that is not there, counts its failed episodes, refuses
rewards that are no sane numbers and lets its process exit. Every server is local
(127.0.0.1); floods are a handful of connections against tiny limits."""

from __future__ import annotations

import json
import logging
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

pytest.importorskip(
    "openenv.core", reason="needs openenv-core: pip install 'ragen[openenv]' (make test has it)"
)

from fakes import child_env, short_train_args  # noqa: E402
from fastapi import FastAPI, WebSocket  # noqa: E402
from openenv.core import (  # noqa: E402
    Action,
    Environment,
    GenericEnvClient,
    Observation,
    State,
    create_app,
)
from openenv_guess import make_app  # noqa: E402

from ragen.cli import main  # noqa: E402
from ragen.envs import make  # noqa: E402
from ragen.envs.serving.openenv_server import AppServer, OpenEnvServer  # noqa: E402
from ragen.errors import EnvUnavailableError  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
GUESS = {"action_fn": "openenv_guess:to_action", "observation_fn": "openenv_guess:to_text"}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _address(url: str) -> tuple[str, int]:
    host, port = url.removeprefix("http://").split(":")
    return host, int(port)


def _post(url: str, body: bytes, token: str | None = None) -> tuple[int, dict]:
    request = urllib.request.Request(url, data=body, method="POST")
    request.add_header("Content-Type", "application/json")
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read() or b"{}")


def _raw(url: str, data: bytes, wait: float = 5.0) -> bytes:
    """Send raw bytes; what the server answers until it closes (or ``wait`` s pass)."""
    with socket.create_connection(_address(url), timeout=wait) as sock:
        sock.sendall(data)
        chunks = []
        try:
            while chunk := sock.recv(65536):
                chunks.append(chunk)
        except (TimeoutError, ConnectionResetError):
            pass
    return b"".join(chunks)


def _health(url: str) -> int:
    with urllib.request.urlopen(url + "/health", timeout=5) as response:
        return response.status


# -- item 1: a dead or garbage server is found at the start; failed episodes count -------
@pytest.fixture
def garbage_server():
    """Something listening that is no HTTP server: it answers every connection with
    garbage and closes."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(8)
    sock.settimeout(0.2)
    stop = threading.Event()

    def answer():
        while not stop.is_set():
            try:
                conn, _ = sock.accept()
            except TimeoutError:
                continue
            with conn:
                conn.sendall(b"\x00\x01garbage, not HTTP\r\n\r\n")

    thread = threading.Thread(target=answer, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    stop.set()
    thread.join(timeout=2)
    sock.close()


def test_train_and_eval_against_a_dead_openenv_server_fail_fast(tiny_model_dir, tmp_path, capsys):
    """The probe: `ragen eval --model oracle --env openenv --env-config
    url=http://127.0.0.1:1 --n 4` and `ragen train env=openenv ...` exited 0. Now the
    env manager's check_available stops both before the model loads, in one line."""
    url = f"http://127.0.0.1:{_free_port()}"
    run = tmp_path / "run"
    args = [a for a in short_train_args(tiny_model_dir, run) if a != "env=sokoban"]
    assert main([*args, "env=openenv", f"env.config.url={url}"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "ragen train: error: the OpenEnv environment at" in err[0]
    assert "unavailable" in err[0] and "--protocol openenv" in err[0]
    assert not (run / "metrics.jsonl").exists()
    code = main(["eval", "--model", "oracle", "--env", "openenv", "--env-config", f"url={url}",
                 "--n", "4", "--out", str(tmp_path / "eval")])  # fmt: skip
    assert code == 2 and not (tmp_path / "eval" / "metrics.json").exists()
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "ragen eval: error: the OpenEnv environment at" in err[0]


def test_a_server_that_is_no_openenv_server_is_named_at_the_start(garbage_server):
    from ragen.envs.serving.http_server import EnvServer

    with pytest.raises(EnvUnavailableError, match="not OpenEnv's JSON.*no OpenEnv server"):
        make("openenv", url=garbage_server, timeout=2).check_available()
    # ragen's own protocol on that port: /schema is 404 there, and the fix says env=remote
    with EnvServer("bandit") as server:
        with pytest.raises(EnvUnavailableError, match="HTTP 404.*env=remote"):
            make("openenv", url=server.url).check_available()


def test_failed_openenv_episodes_count_as_env_errors_and_stop_the_rollout():
    """The probe: episodes on a dead server did not count (`env_error_rate` 0.0), so
    `rollout.max_env_error_share` never fired. A server gone after the start now cuts
    every episode with env_error set, and the rollout stops with the reason."""
    from ragen.agent.env_manager import EnvStateManager
    from ragen.agent.policies import OraclePolicy
    from ragen.agent.rollout import RolloutConfig, run_rollout

    server = OpenEnvServer("frozen_lake").start()
    manager = EnvStateManager("openenv", {"url": server.url, "timeout": 5}, env_groups=2,
                              group_size=2)  # fmt: skip
    server.stop()  # gone after the start check
    config = RolloutConfig(max_turns=2, max_actions_per_turn=1, max_actions_per_trajectory=2)
    with pytest.raises(EnvUnavailableError, match=r"4 of 4 episodes .*max_env_error_share"):
        run_rollout(OraclePolicy(), manager, config, [0, 1])
    assert all(env.env_error for env in manager.envs)
    manager.close()


# -- item 4: the process exits after its last step ------------------------------------------
def test_a_process_with_an_open_session_exits(tmp_path):
    """The probe: `ragen train env=openenv` never exited after its last step: at
    interpreter shutdown ``__del__`` closed openenv-core's sync client, which started a
    thread and deadlocked. A child that leaves sessions open (one collected only at
    shutdown) must now exit at once, with status 0."""
    with OpenEnvServer("sokoban") as server:
        script = (
            "import ragen.envs as envs\n"
            f"env = envs.make('openenv', url={server.url!r})\n"
            "env.reset(0); env.step('up')\n"
            "kept = [envs.make('openenv', url=env.url)]\n"
            "kept[0].reset(1)\n"
            "kept.append(kept)  # a cycle: collected only at interpreter shutdown\n"
            "print('played', flush=True)\n"
        )
        child = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=child_env(ROOT),
                               capture_output=True, text=True, timeout=60)  # fmt: skip
    assert child.returncode == 0 and "played" in child.stdout, child.stderr[-2000:]


# -- items 2, 3: the token, the body limit, the read timeout, bounded sessions ---------------
def test_a_token_guards_http_and_the_websocket(monkeypatch):
    """The probe: `serve-env --protocol openenv` ignored --token (200 without auth)."""
    with OpenEnvServer("frozen_lake", token="s3cret") as server:
        answer = _raw(server.url, b"GET /schema HTTP/1.1\r\nHost: x\r\n\r\n", wait=3)
        assert answer.startswith(b"HTTP/1.1 401") and b"missing or wrong token" in answer
        with pytest.raises(Exception, match="401"):  # the WebSocket handshake too
            GenericEnvClient(base_url=server.url).sync().connect()
        assert _post(server.url + "/reset", b'{"seed": 0}')[0] == 401
        with pytest.raises(EnvUnavailableError, match="refused this client.*RAGEN_ENV_TOKEN"):
            make("openenv", url=server.url).check_available()
        env = make("openenv", url=server.url, token="s3cret")
        env.check_available()
        assert env.reset(0) == make("frozen_lake").reset(0) and not env.env_error
        env.close()
        monkeypatch.setenv("RAGEN_ENV_TOKEN", "s3cret")  # the client reads it too
        env = make("openenv", url=server.url)
        assert env.reset(2) == make("frozen_lake").reset(2)
        env.close()


def test_a_body_over_the_limit_is_refused_unread():
    """The probe: a 300 MB POST to /step was read whole (RSS 188 MB -> 1.1 GB). Now a
    declared length over 1 MiB is 413 at once, and a chunked body is cut at 1 MiB."""
    with OpenEnvServer("frozen_lake") as server:
        head = b"POST /step HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        answer = _raw(server.url, head + b"Content-Length: 300000000\r\n\r\n" + b"x" * 1000)
        assert answer.startswith(b"HTTP/1.1 413") and b"over 1048576 bytes" in answer
        chunk = b"x" * 65536
        chunked = b"".join(b"%x\r\n%s\r\n" % (len(chunk), chunk) for _ in range(20))
        answer = _raw(server.url, head + b"Transfer-Encoding: chunked\r\n\r\n" + chunked)
        assert answer.startswith(b"HTTP/1.1 413")
        assert _health(server.url) == 200


def test_half_sent_requests_are_bounded_and_timed_out():
    """The probe: half-sent requests were never timed out (about 20,600 exhausted the
    descriptors and /health stopped answering). Now at most --max-threads connections
    are open (more get 503 at once), each is closed --read-timeout after it opened,
    however it trickles, and a stalled body gets 408."""
    with OpenEnvServer("frozen_lake", read_timeout=0.6, max_threads=4) as server:
        stalled = [socket.create_connection(_address(server.url)) for _ in range(4)]
        for sock in stalled:
            sock.sendall(b"POST /reset HT")
        time.sleep(0.2)
        extra = [socket.create_connection(_address(server.url), timeout=3) for _ in range(3)]
        assert all(sock.recv(12) == b"HTTP/1.1 503" for sock in extra)
        for sock in stalled[:2]:  # trickling bytes does not keep a connection open
            sock.sendall(b"T")
        time.sleep(0.8)  # past read_timeout: all closed by the server
        for sock in stalled:
            sock.settimeout(2)
            assert sock.recv(100) == b""
        assert _health(server.url) == 200
        answer = _raw(server.url, b"POST /reset HTTP/1.1\r\nHost: x\r\nContent-Length: 50\r\n"
                      b"\r\n{\"seed\"", wait=3)  # fmt: skip
        assert answer.startswith(b"HTTP/1.1 408") and b"within 0.6s" in answer
        for sock in stalled + extra:
            sock.close()


def test_an_idle_session_is_closed_and_frees_its_slot():
    """The probe: idle WebSocket sessions held their slots past --episode-timeout."""
    # 1 s: long enough that the second client surely meets the first one's session
    with OpenEnvServer("frozen_lake", max_sessions=1, episode_timeout=1.0) as server:
        first = make("openenv", url=server.url, timeout=5)
        first.reset(0)
        second = make("openenv", url=server.url, timeout=5)
        second.reset(0)  # the one slot is taken
        assert second.truncated and "max_concurrent_envs" in second.env_error
        time.sleep(1.6)  # the first session idles past the timeout: closed by the server
        _, _, _, truncated, info = first.step("up")
        assert truncated and "1001" in info["env_error"]
        second.reset(0)
        assert not second.done and second.env_error is None  # the slot was free again
        first.close()
        second.close()


def test_a_websocket_message_over_the_limit_closes_the_session():
    with OpenEnvServer("frozen_lake") as server, GenericEnvClient(base_url=server.url).sync() as c:
        c.reset(seed=0)
        with pytest.raises(Exception, match="1009|too big|closed"):
            c.step({"action": "up " * 400_000})
        assert _health(server.url) == 200


# -- item 6, 12 and 52: one-line errors, seeds, steps before reset, the state -----------------
def test_bad_seeds_and_a_step_before_reset_are_4xx_with_a_message(caplog):
    """The probe: `{"seed": NaN}` or `{"rng_seed": "x"}` gave a 500 and a server-side
    traceback; a step before reset played an unseeded room."""
    with OpenEnvServer("sokoban") as server:
        with caplog.at_level(logging.WARNING):
            for body, status, words in [
                (b'{"seed": NaN}', 422, "seed"),
                (b'{"seed": 1, "rng_seed": "x"}', 400, "rng_seed must be an integer or null"),
                (b'{"seed": 1, "rng_seed": 1.5}', 400, "rng_seed must be an integer"),
                (b'{"seed": 1e400}', 422, "seed"),
            ]:
                code, reply = _post(server.url + "/reset", body)
                assert code == status and words in str(reply["detail"]), (body, reply)
            code, reply = _post(server.url + "/step", b'{"action": {"action": "up"}}')
            assert code == 409 and "reset first" in reply["detail"]
        assert "Traceback" not in caplog.text
        with GenericEnvClient(base_url=server.url).sync() as client:
            with pytest.raises(RuntimeError, match="no episode: reset first"):
                client.step({"action": "up"})
            with pytest.raises(RuntimeError, match="rng_seed must be an integer"):
                client.reset(seed=1, rng_seed="x")
            result = client.reset(seed=3)  # the session still plays
            assert result.observation["seed"] == 3


def test_the_state_has_an_episode_id_and_counts_steps_as_info_does():
    """Issue 52: the state's episode_id was None and step_count counted an invalid action
    that info["steps"] did not. Both count only actions that were played."""
    with OpenEnvServer("sokoban") as server, GenericEnvClient(base_url=server.url).sync() as c:
        c.reset(seed=3)
        first = c.state()["episode_id"]
        assert isinstance(first, str) and first
        steps = 0
        for action in ["up", "jump", "left", "(nothing)", "down"]:
            result = c.step({"action": action})
            steps = result.observation["info"].get("steps", steps)
            assert c.state()["step_count"] == steps
        assert steps == 3
        c.reset(seed=4)
        assert c.state()["episode_id"] not in (None, first)
        c.reset(seed=4, episode_id="mine")
        assert c.state()["episode_id"] == "mine"


@pytest.mark.parametrize(
    "args, words",
    [
        (["--max-episodes", "0"], "--max-episodes 0: must be an integer >= 1"),
        (["--max-threads", "0"], "--max-threads 0: must be an integer >= 1"),
        (["--read-timeout", "nan"], "--read-timeout nan: must be a finite number"),
        (["--episode-timeout", "-1"], "--episode-timeout -1: must be a finite number"),
        (["--host", "nosuch.invalid"], "--host 'nosuch.invalid' is not an address"),
    ],
)
@pytest.mark.parametrize("protocol", ["openenv", "ragen"])
def test_serve_env_refuses_bad_limits_and_hosts_in_one_line(protocol, args, words, capsys):
    code = main(["serve-env", "bandit", "--protocol", protocol, "--port", "0", *args])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err, err
    (line,) = err.strip().splitlines()
    assert line.startswith("ragen serve-env: error: ") and words in line and "Fix:" in line


def test_serve_env_openenv_on_a_port_in_use_is_one_line(capsys):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        code = main(["serve-env", "bandit", "--protocol", "openenv", "--port", str(port)])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err
    assert f"port {port} on 127.0.0.1 is already in use" in err and "--port 0" in err


# -- item 12 and 52: rewards that are no numbers, a server without a vocabulary --------------
class _Ping(Action):
    word: str


class _Pong(Observation):
    text: str = ""


class _HugeReward(Environment):
    """A native OpenEnv env paying 1e308 on its first step."""

    SUPPORTS_CONCURRENT_SESSIONS = True

    def reset(self, seed=None, episode_id=None, **kwargs):
        return _Pong(text="ready")

    def step(self, action, timeout_s=None, **kwargs):
        return _Pong(text="paid", reward=1e308, done=False)

    @property
    def state(self):
        return State()


def _raw_openenv_app(reward_json: str):
    """A minimal server of OpenEnv's WebSocket protocol that sends ``reward_json``
    verbatim (openenv-core itself sends a NaN reward as null; others may not)."""
    app = FastAPI()

    @app.get("/schema")
    def schema():
        return {"action": {"properties": {"word": {"type": "string"}}}}

    @app.websocket("/ws")
    async def session(ws: WebSocket):
        await ws.accept()
        while True:
            kind = json.loads(await ws.receive_text()).get("type")
            if kind == "close":
                break
            reward = "null" if kind == "reset" else reward_json
            await ws.send_text('{"type": "observation", "data": {"observation": {"text": "x"},'
                               f' "reward": {reward}, "done": false}}}}')  # fmt: skip
        await ws.close()

    return app


@pytest.mark.parametrize("reward", ["NaN", "Infinity", "1e308"])
def test_rewards_that_are_no_sane_numbers_end_the_episode_as_env_failures(reward):
    """The probe: the client turned a non-finite reward into 0 and let 1e308 through."""
    with AppServer(_raw_openenv_app(reward)) as server:
        env = make("openenv", url=server.url)
        env.check_available()
        env.reset(0)
        _, value, _, truncated, info = env.step("go")
        assert truncated and value == 0.0 and "the reward" in env.env_error
        assert info["env_error"] == env.env_error
        env.close()
    app = create_app(_HugeReward, _Ping, _Pong, max_concurrent_envs=2)
    with AppServer(app) as server:
        env = make("openenv", url=server.url)
        env.reset(0)
        assert env.step("go")[3] and "beyond +-1e+06" in env.env_error
        env.close()


def test_eval_of_a_server_without_a_vocabulary_names_action_names(tmp_path, capsys):
    """Issue 52: evaluating a non-ragen OpenEnv server without action_names said "Fix:
    --model oracle with --epsilon 0", which such a server cannot serve."""
    with AppServer(make_app()) as server:
        config = [f"url={server.url}", *(f"{k}={v}" for k, v in GUESS.items())]
        code = main(["eval", "--model", "oracle", "--env", "openenv", "--n", "2", "--out",
                     str(tmp_path), "--env-config", *config])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err
    assert "--env-config 'action_names=[a,b,c]'" in err and "--epsilon 0" not in err
