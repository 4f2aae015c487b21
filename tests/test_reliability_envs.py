"""No silent garbage from environments, served environments, the `vagen` preset and the
docs: each test replays the input a probe used and checks what the program does now
(docs/RELIABILITY.md lists them)."""

from __future__ import annotations

import pytest

from ragen.envs import make
from ragen.envs.games.frozen_lake import FrozenLakeEnv
from ragen.errors import EnvOptionError, RagenError


# -- bad env options are user errors (one line from the CLI) -----------------------------
@pytest.mark.parametrize(
    "name, options, message",
    [
        ("frozen_lake", {"p": 1.5}, r"environment 'frozen_lake': p=1.5 must be a probability"),
        ("frozen_lake", {"desc": ["SFX", "FFG"]}, "unknown cell"),
        ("sokoban", {"dim_room": "abc"}, "dim_room must be two whole numbers"),
        ("sokoban", {"dim_room": [2, 2]}, "too small"),
        ("sokoban", {"max_steps": 0}, "max_steps=0 must be >= 1"),
        ("countdown", {"number_use": "twice"}, "number_use"),
        ("sudoku", {"size": 5}, "size=5"),
        ("game_2048", {"win_tile": 7}, "win_tile=7"),
        ("bandit", {"high_prob": 2}, "high_prob=2"),
        ("remote", {"url": "localhost:1"}, "not an HTTP address"),
    ],
)
def test_bad_env_options_raise_the_user_error_class(name, options, message):
    with pytest.raises(EnvOptionError, match=message) as err:
        make(name, **options)
    # a RagenError: `ragen <command>` prints it as one line; still a ValueError for callers
    assert isinstance(err.value, RagenError) and isinstance(err.value, ValueError)
    assert "\n" not in str(err.value)


# -- item 1: a remote env whose server is not there ---------------------------------------
def _dead_url() -> str:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"  # nothing listens there once the socket closes


def test_train_and_eval_against_a_dead_server_fail_fast(tiny_model_dir, tmp_path, capsys):
    """The probe's input: `ragen train env=remote env.config.url=<nothing listening>` ran
    4 steps on "(remote environment unavailable)" prompts and exited 0; `ragen eval`
    printed a 0% table. Both now stop at the start with one line and status 2."""
    from fakes import short_train_args

    from ragen.cli import main

    url = _dead_url()
    run = tmp_path / "run"
    args = [a for a in short_train_args(tiny_model_dir, run) if a != "env=sokoban"]
    assert main([*args, "env=remote", f"env.config.url={url}"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "ragen train: error: the remote environment at" in err[0]
    assert "unavailable" in err[0] and "ragen serve-env" in err[0]
    assert not list(run.glob("checkpoints/*")) and not (run / "metrics.jsonl").exists()

    out = tmp_path / "eval"
    code = main(
        ["eval", "--model", "random", "--env", "remote", "--env-config", f"url={url}",
         "--n", "2", "--out", str(out)]
    )  # fmt: skip
    assert code == 2 and not (out / "metrics.json").exists()
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "ragen eval: error: the remote environment at" in err[0]


def _stop_server_after_first_turn(server):
    """The oracle, but the served env's server stops when the second turn is asked for."""
    from ragen.agent.policies import OraclePolicy

    class Policy(OraclePolicy):
        calls = 0

        def act(self, requests, params):
            self.calls += 1
            if self.calls == 2:
                server.stop()
            return super().act(requests, params)

    return Policy()


def test_a_server_gone_mid_run_stops_the_rollout_with_the_reason():
    """More than rollout.max_env_error_share (0.25) of a batch's episodes cut by the
    server: the rollout raises, so a run stops instead of training on them."""
    from ragen.agent.env_manager import EnvStateManager
    from ragen.agent.rollout import RolloutConfig, run_rollout
    from ragen.envs.serving.http_server import EnvServer
    from ragen.errors import EnvUnavailableError

    server = EnvServer("cube2x2", {"scramble_depth": 6}).start()
    try:
        manager = EnvStateManager(
            "remote", {"url": server.url, "retries": 0}, env_groups=2, group_size=2
        )
        config = RolloutConfig(max_turns=4, max_actions_per_turn=1, max_actions_per_trajectory=4)
        with pytest.raises(EnvUnavailableError, match=r"4 of 4 episodes .*cannot reach"):
            run_rollout(_stop_server_after_first_turn(server), manager, config, [0, 1])
    finally:
        server.httpd.server_close()


# -- item 12: remote and local answer alike; serve-env survives bad clients ----------------
class FragileLake(FrozenLakeEnv):
    """FrozenLake whose ``_step`` raises on ``explode`` (a bug in an env)."""

    def _step(self, action):
        if action == "explode":
            raise KeyError("boom")
        return super()._step(action)


@pytest.fixture
def fragile_lake():
    from ragen.envs import register, registry

    register("test_fragile_lake", f"{__name__}:FragileLake", "test: raises on 'explode'")
    yield "test_fragile_lake"
    registry._REGISTRY.pop("test_fragile_lake", None)


def test_remote_and_local_give_the_same_answer_to_a_huge_action_and_an_env_exception(
    fragile_lake,
):
    """The probe: an action over 1 MiB or an env exception ended a remote episode as
    truncated, where locally the string was an invalid no-op. Now: a huge action is an
    invalid no-op both ways, an exception ends the episode as truncated both ways."""
    from ragen.envs.serving.http_server import EnvServer

    huge = "up " * (1 << 19)  # 1.5 MiB
    with EnvServer(fragile_lake) as server:
        local, remote = make(fragile_lake), make("remote", url=server.url)
        for env in (local, remote):
            before = env.reset(3)
            obs, reward, terminated, truncated, info = env.step(huge)
            assert (obs, reward, terminated, truncated) == (before, 0.0, False, False)
            assert not info["action_is_valid"] and "at most 65536" in info["reason"]
            assert env.env_error is None
            obs, reward, terminated, truncated, info = env.step("explode")
            assert (reward, terminated, truncated) == (0.0, False, True) and env.done
            assert info["env_error"] == "KeyError: 'boom'" == env.env_error
            assert obs == before
        remote.close()


def _raw(url: str, data: bytes, wait: float = 5.0, shut_write: bool = False) -> bytes:
    """Send raw bytes to the server; what it answers (until it closes or ``wait`` s)."""
    import socket

    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=wait) as sock:
        sock.sendall(data)
        if shut_write:
            sock.shutdown(socket.SHUT_WR)
        chunks = []
        try:
            while chunk := sock.recv(65536):
                chunks.append(chunk)
        except TimeoutError:
            pass
    return b"".join(chunks)


@pytest.mark.parametrize(
    "headers, body, shut_write, status",
    [
        (b"Content-Length: -1\r\n", b'{"seed": 0}', False, b"400"),
        (b"Content-Length: abc\r\n", b'{"seed": 0}', False, b"400"),
        (b"", b'{"seed": 0}', False, b"411"),
        (b"Content-Length: 100\r\n", b'{"seed": 0}', True, b"400"),  # short body, then EOF
        (b"Content-Length: 100\r\n", b'{"seed": 0}', False, b"408"),  # short body, stalls
        (b"Content-Length: 3\r\n", b"abc", False, b"400"),  # garbage
        (b"Content-Length: 2000000\r\n", b"", False, b"413"),
    ],
)
def test_serve_env_answers_bad_bodies_with_4xx(headers, body, shut_write, status):
    from ragen.envs.serving.http_server import EnvServer

    with EnvServer("frozen_lake", read_timeout=0.5) as server:
        request = b"POST /reset HTTP/1.1\r\nHost: x\r\n" + headers + b"\r\n" + body
        answer = _raw(server.url, request, shut_write=shut_write)
        assert answer.startswith(b"HTTP/1.1 " + status), answer[:200]
        # and the server still serves
        assert make("remote", url=server.url).reset(0)


def test_stalled_connections_hold_a_bounded_number_of_threads_then_time_out():
    """The probe: 150 stalled connections made 153 threads. Now at most max_threads
    requests run at once (the rest are answered 503), and a stalled one is closed after
    read_timeout."""
    import socket
    import threading
    import time

    from ragen.envs.serving.http_server import EnvServer

    before = threading.active_count()
    with EnvServer("frozen_lake", read_timeout=1.0, max_threads=8) as server:
        host, port = server.url.removeprefix("http://").split(":")
        stalled = [socket.create_connection((host, int(port))) for _ in range(150)]
        for sock in stalled:  # half a request line, then nothing
            sock.sendall(b"POST /reset HT")
        time.sleep(0.5)
        assert threading.active_count() - before <= 8 + 2  # + the server's own thread
        busy = [sock for sock in stalled if sock.recv(12, socket.MSG_PEEK)]
        assert len(busy) >= 150 - 8  # answered at once: "HTTP/1.1 503"
        assert all(sock.recv(12) == b"HTTP/1.1 503" for sock in busy)
        time.sleep(1.5)  # past read_timeout: the 8 stalled ones were closed
        assert threading.active_count() - before <= 2
        assert make("remote", url=server.url).reset(0)
        for sock in stalled:
            sock.close()


def test_an_unclosed_episode_is_dropped_after_the_idle_timeout():
    import time

    from ragen.envs.serving.http_server import EnvService
    from ragen.envs.serving.rules import RequestError

    service = EnvService("frozen_lake", episode_timeout=0.2)
    episode = service.reset({"seed": 0})["episode_id"]
    service.step({"episode_id": episode, "action": "up"})  # in use: kept
    time.sleep(0.3)
    with pytest.raises(RequestError, match="idle over 0.2s") as err:
        service.step({"episode_id": episode, "action": "up"})
    assert err.value.status == 404 and service.health()["episodes"] == 0


def test_a_token_guards_every_request(monkeypatch, capsys):
    from ragen.envs.serving.http_server import EnvServer
    from ragen.envs.serving.rules import is_loopback
    from ragen.errors import EnvUnavailableError

    assert is_loopback("127.0.0.1") and is_loopback("::1") and not is_loopback("0.0.0.0")
    with EnvServer("frozen_lake", token="s3cret") as server:
        answer = _raw(server.url, b"GET /info HTTP/1.1\r\nHost: x\r\n\r\n", wait=2)
        assert answer.startswith(b"HTTP/1.1 401")
        with pytest.raises(EnvUnavailableError, match="refused this client"):
            make("remote", url=server.url).check_available()
        monkeypatch.setenv("RAGEN_ENV_TOKEN", "s3cret")  # the client reads it too
        env = make("remote", url=server.url)
        env.check_available()
        assert env.reset(0) == make("frozen_lake").reset(0)


# -- item 8: TextArena games whose messages broke the adapter; env exceptions -------------
@pytest.mark.parametrize("game", ["Countdown-v0", "Cryptarithm-v0", "Slitherlink-v0"])
def test_textarena_games_with_shifted_messages_play(game):
    """The probe: reset(0) then step("1") raised AttributeError in the adapter."""
    pytest.importorskip("textarena")
    env = make("textarena", game=game)
    first = env.reset(0)
    obs, reward, terminated, truncated, info = env.step("1")
    assert env.env_error is None and "env_error" not in info
    assert not terminated and not truncated and reward == 0.0
    assert not info["action_is_valid"] and obs == first  # TextArena rejected "[1]"


def test_any_env_exception_ends_only_its_episode_in_a_run():
    """Any exception type inside an env's step ends that episode (env_truncated, the
    reason kept); the rollout, and so the run, goes on below the configured share."""
    from ragen.agent.env_manager import EnvStateManager
    from ragen.agent.policies import RandomPolicy
    from ragen.agent.rollout import RolloutConfig, run_rollout

    class OneBadSeed(FrozenLakeEnv):
        def _step(self, action):
            if self.seed == 7:
                raise AttributeError("'int' object has no attribute 'strip'")
            return super()._step(action)

    manager = EnvStateManager(OneBadSeed, env_groups=4, group_size=2)
    config = RolloutConfig(max_turns=2, max_actions_per_turn=1, max_actions_per_trajectory=2)
    result = run_rollout(RandomPolicy(), manager, config, [7, 1, 2, 3])
    bad = [t for t in result.trajectories if t.seed == 7]
    assert len(bad) == 2 and all(t.end_reason == "env_truncated" for t in bad)
    assert all(t.env_error.startswith("AttributeError") for t in bad)
    assert all(t.env_error is None for t in result.trajectories if t.seed != 7)
    assert result.stats["env_error_episodes"] == 2  # 2 of 8 = 0.25: at the limit, not past it


# -- item 9: numbers past Python's 4300-digit int() limit ---------------------------------
@pytest.mark.parametrize(
    "name, action",
    [
        ("sudoku", "1 1 " + "9" * 4301),
        ("sudoku_9x9", "1 1 " + "9" * 4301),
        ("ta_guess_the_number", "9" * 4301),
        ("ta_mastermind", "1 2 3 " + "9" * 4301),
    ],
)
def test_a_4301_digit_number_is_an_invalid_action(name, action):
    if name.startswith("ta_"):
        pytest.importorskip("textarena")
    env = make(name)
    before = env.reset(0)
    obs, _, terminated, truncated, info = env.step(action)
    assert not info["action_is_valid"] and not (terminated or truncated)
    assert obs == before and env.env_error is None


def test_the_checker_fuzzes_long_numbers():
    """An env whose parser calls int() on what it matched, as sudoku's did: the
    checker's garbage (longest digit string 300 before) now finds it."""
    import re

    from ragen.envs import make_info
    from ragen.envs.checker import EnvCheckError, check_env

    class IntParser(FrozenLakeEnv):
        def _step(self, action):
            m = re.fullmatch(r"(\d+) (\d+)", action)
            if m and int(m.group(1)) + int(m.group(2)) < 0:
                return self.render(), 0.0, False, False, make_info(True, False, False)
            return super()._step(action)

    with pytest.raises(EnvCheckError, match="raised ValueError: Exceeds the limit"):
        check_env(IntParser(), seeds=(0,), fuzz=5)


# -- item 10: out-of-vocabulary moves, bounded episodes ------------------------------------
@pytest.mark.parametrize(
    "name, action", [("ta_guess_the_number", "999"), ("ta_mastermind", "9 9 9 9")]
)
def test_out_of_vocabulary_moves_are_invalid(name, action):
    pytest.importorskip("textarena")
    env = make(name)
    before = env.reset(0)
    obs, _, terminated, truncated, info = env.step(action)
    assert not info["action_is_valid"] and not info["action_is_effective"]
    assert obs == before and not (terminated or truncated)


def test_300_illegal_hanoi_moves_end_the_episode():
    """The probe: 300 repeats of an illegal move never ended the episode. A rejected move
    of the vocabulary now counts toward max_steps (default 100): the episode is bounded."""
    pytest.importorskip("textarena")
    env = make("ta_tower_of_hanoi")
    env.reset(0)
    env.step("A C")  # the smallest disk onto C
    illegal = "A C"  # now the middle disk onto the smallest: forbidden
    steps = 1
    for _ in range(300):
        obs, _, terminated, truncated, info = env.step(illegal)
        steps += 1
        assert info["action_is_valid"] and not info["action_is_effective"]
        if truncated:
            break
    assert truncated and not terminated and steps == env.max_steps == 100
    assert "At most 100 moves" in env.instructions


# -- item 13: TextArena's errors say what is wrong -----------------------------------------
@pytest.mark.parametrize(
    "game, message",
    [
        ("Guesstehnumber-v0", r"has no game .*Did you mean 'GuessTheNumber-v0'"),
        ("GuessWho-v0", r"has the game 'GuessWho-v0' but .* needs an API key"),
        ("Klondike-v0", r"has the game 'Klondike-v0' but .* does not compile on this Python"),
    ],
)
def test_textarena_tells_a_missing_game_from_one_it_cannot_build(game, message, monkeypatch):
    pytest.importorskip("textarena")
    monkeypatch.delenv("OPENROUTER_API_KEY", raising=False)
    if game == "Klondike-v0":
        import importlib

        try:  # its f-strings nest quotes, which compiles from Python 3.12 on (PEP 701)
            importlib.import_module("textarena.envs.Klondike.env")
            pytest.skip("Klondike compiles on this Python")
        except SyntaxError:
            pass
    with pytest.raises(EnvOptionError, match=message) as err:
        make("textarena", game=game)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("name", ["sokoban", "frozen_lake"])
def test_the_validation_list_holds_distinct_states(name):
    """The probe: 256 validation seeds held 240 distinct Sokoban rooms, 250 FrozenLake
    maps. Now the list is deduplicated by state, as the training pool is."""
    from ragen.agent.env_manager import EnvStateManager, is_held_out

    manager = EnvStateManager(name, env_groups=1, group_size=1)
    seeds = manager.validation_seeds(256)
    probe = make(name)
    keys = []
    for seed in seeds:
        probe.reset(seed)
        keys.append(probe.state_key())
    assert len(set(seeds)) == len(set(keys)) == 256
    assert all(is_held_out(k) for k in keys)
    assert manager.validation_seeds(4, offset=10) == seeds[10:14]  # a fixed list


# -- item 11: gymnasium success is the wrapped env's own ----------------------------------
def test_cliff_walking_oracle_succeeds_in_13_steps():
    """The docs' own example: the oracle reaches the goal in 13 steps and success was
    False in 20 of 20 episodes (the goal step pays -1). Now True in 20 of 20."""
    from ragen.envs.adapters.gymnasium_env import GymEnv

    env = GymEnv(
        "CliffWalking-v1",
        action_names=["up", "right", "down", "left"],
        ansi_styles=[],
        tabular_oracle=True,
    )
    assert env.success_rule == "terminated"  # "auto" knows CliffWalking
    for seed in range(20):
        env.reset(seed)
        steps = 0
        while not env.done:
            *_, reward, terminated, _, info = env.step(env.oracle_action())
            steps += 1
        assert steps == 13 and terminated and reward == -1.0 and info["success"] and env.success


def test_gym_success_rules_are_per_env(caplog):
    from ragen.envs.adapters.gymnasium_env import GymEnv

    names = ["up", "right", "down", "left"]
    goal = GymEnv("CliffWalking-v1", action_names=names, success_states=[47])
    never = GymEnv("CliffWalking-v1", action_names=names, success=lambda obs, r, term, info: False)
    for env in (goal, never):
        env.reset(0)
        for action in ["up"] + ["right"] * 11 + ["down"]:
            env.step(action)
        assert env.done
    assert goal.success and not never.success
    with pytest.raises(EnvOptionError, match="success='reward'"):
        GymEnv("CliffWalking-v1", action_names=names, success="reward")
    with caplog.at_level("WARNING", logger="ragen.envs.adapters.gymnasium_env"):
        GymEnv("FrozenLake8x8-v1", action_names=["left", "down", "right", "up"])
    assert "FrozenLake8x8-v1: no known success rule" in caplog.text


# -- item 15: what the docs say is what the code does --------------------------------------
def test_the_transformers_floor_is_the_tested_version():
    """pyproject allowed transformers>=4.46 while the VLM path needs 5.x; the floor is
    now the version the suite runs on, and the installed one meets it."""
    import re
    from pathlib import Path

    import transformers
    from packaging.version import Version

    text = (Path(__file__).resolve().parents[1] / "pyproject.toml").read_text()
    floor = re.search(r'"transformers>=([0-9.]+)"', text).group(1)
    assert Version(floor) >= Version("5.24")
    assert Version(transformers.__version__) >= Version(floor)


def test_tiny_vlm_parameter_count_in_the_docs_is_the_clis(tmp_path, capsys):
    from pathlib import Path

    from ragen.cli import main

    assert main(["models", "create-tiny-vlm", "--out", str(tmp_path / "vlm")]) == 0
    printed = capsys.readouterr().out
    docs = (Path(__file__).resolve().parents[1] / "docs" / "VISUAL.md").read_text()
    assert "1,284,480 parameters" in printed and "LLaVA nano: 1,284,480 parameters" in docs


def test_cube2x2_hard_scrambles_are_5_to_10_moves_from_solved():
    from collections import Counter

    env = make("cube2x2_hard")
    lengths = Counter()
    for seed in range(300):
        env.reset(seed)
        lengths[len(env.optimal_plan())] += 1
    assert sorted(lengths.items()) == [(5, 1), (6, 14), (7, 33), (8, 93), (9, 132), (10, 27)]


def test_static_bf16_is_accepted_and_compiled_asks_for_no_cuda_graphs(tiny_model_dir, monkeypatch):
    """docs/RESULTS.md said static-bf16 was not accepted (it is); docs/MODELS.md said
    `compiled` uses CUDA graphs on a GPU (it passes no mode: inductor's default)."""
    import torch

    from ragen.engines.base import SamplingParams
    from ragen.engines.compiled import make_hf_engine
    from ragen.models import load_policy
    from ragen.trainer.config import load_config

    assert load_config(["model.engine=static-bf16"]).model.engine == "static-bf16"
    seen = []

    def fake_compile(fn, **options):  # records the options, compiles nothing
        seen.append(options)
        return fn

    monkeypatch.setattr(torch, "compile", fake_compile)
    model, tok = load_policy(tiny_model_dir, device="cpu")
    engine = make_hf_engine(model, tok, "compiled")
    engine.generate([tok.encode("hello")], SamplingParams(max_new_tokens=3, seed=0))
    assert seen and all("mode" not in options for options in seen)


# -- item 16: rollout/context_inexact on the tiny VLM ---------------------------------------
def _reply_with_foreign_eos(tokenizer) -> list[int]:
    """A garbled reply as random tiny models give: a lone UTF-8 lead byte (decodes to
    U+FFFD), then <|endoftext|>, an EOS the ChatML template never writes at a turn end."""
    lead = tokenizer.convert_tokens_to_ids("Ã")  # byte 0xC3 alone: half a character
    eot = tokenizer.convert_tokens_to_ids("<|endoftext|>")
    return tokenizer.encode("<answer>up", add_special_tokens=False) + [lead, eot]


def _check_foreign_eos_context(fmt, images=None):
    from ragen.agent.context import ContextManager

    tok = getattr(fmt.tokenizer, "tokenizer", fmt.tokenizer)
    ctx = ContextManager(fmt, "sys")
    ctx.next_prompt("Turn 1 <image>" if images else "Turn 1", images=images)
    reply = _reply_with_foreign_eos(tok)
    content = ctx.add_response(reply, ended_by_eos=True)
    assert "\ufffd" in content
    ctx.next_prompt("Turn 2 <image>" if images else "Turn 2", images=images)
    ctx.add_response(tok.encode("<answer>down</answer>", add_special_tokens=False))
    (sample,) = ctx.samples()
    # the sampled EOS stays, the template's whole end of turn follows it; still exact
    end = sample.turn_ends[0]
    assert sample.input_ids[end - len(reply) + 1 : end + 1] == reply
    assert fmt.decode(sample.input_ids[end + 1 : end + 3]).startswith("<|im_end|>")
    assert sample.exact and ctx.num_fallbacks == 0


def test_a_reply_ending_in_a_foreign_eos_keeps_the_context_exact():
    """The probe: the tiny VLM reported rollout/context_inexact 1-2 of 16 episodes a
    step on replies with U+FFFD. The cause was the EOS those garbled replies end with
    (<|endoftext|>, not the template's <|im_end|>): the append-only check then failed and
    the episode fell back to fixed-prefix glue. The check now allows a sampled EOS."""
    from fakes import tiny_tokenizer

    from ragen.agent.context import ChatFormat

    _check_foreign_eos_context(ChatFormat(tiny_tokenizer("chatml")))


def test_the_tiny_vlm_context_stays_exact_after_a_foreign_eos(tmp_path):
    import numpy as np

    from ragen.agent.visual_context import chat_format_for
    from ragen.models import load_policy
    from ragen.models.tiny_vlm import create_tiny_vlm

    folder = create_tiny_vlm(tmp_path / "vlm", seed=0, architecture="llava")
    _, processor = load_policy(str(folder), device="cpu")
    fmt = chat_format_for(processor, "auto", None)
    picture = np.zeros((84, 84, 3), dtype=np.uint8)
    _check_foreign_eos_context(fmt, images=[picture])


def test_a_busy_server_is_asked_again_not_given_up():
    """With every request thread taken (503), the client backs off and asks again, so a
    burst of episodes larger than --max-threads does not cut them."""
    import socket
    import threading
    import time

    from ragen.envs.serving.http_server import EnvServer

    with EnvServer("frozen_lake", read_timeout=0.6, max_threads=2) as server:
        host, port = server.url.removeprefix("http://").split(":")
        stalled = [socket.create_connection((host, int(port))) for _ in range(2)]
        for sock in stalled:
            sock.sendall(b"POST /reset HT")  # both threads wait for the rest
        time.sleep(0.2)
        env = make("remote", url=server.url, retry_wait=0.1)
        result = {}
        thread = threading.Thread(target=lambda: result.update(obs=env.reset(0)))
        thread.start()
        thread.join(timeout=15)
        for sock in stalled:
            sock.close()
    assert result["obs"] == make("frozen_lake").reset(0) and env.env_error is None
