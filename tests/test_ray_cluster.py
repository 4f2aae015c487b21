"""A real two-node Ray cluster on one machine: a head and a second node started as their
own ``ray start`` processes (each with its own CPUs), token authentication on as Ray
documents it (``RAY_AUTH_MODE=token`` and one shared token on every node and client).
``ragen train`` joins it by address and trains with rollout workers on both nodes; the
second node killed mid-rollout has its groups played again on the head, to the same
trajectories; joining fails with the real cause (authentication, nothing listening).

The cluster gets free ports and its own temp dir, and only its own processes are ever
stopped (by their ids), so other Ray instances on the machine are left alone.
"""

import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

ray = pytest.importorskip("ray")

from ragen.cli import main  # noqa: E402
from ragen.errors import ConfigError  # noqa: E402

RAY = str(Path(sys.executable).with_name("ray"))
HOST = "127.0.0.1"
# Ray reads its auth settings once per process, at its first init: after an earlier
# test's local (unauthenticated) Ray, this process cannot join a token-auth cluster. So
# the tests that use the cluster run in a fresh process of their own
# (test_the_cluster_tests_in_a_fresh_process), and are skipped in the suite's process.
IN_FRESH_PROCESS = os.environ.get("RAGEN_RAY_CLUSTER_CHILD") == "1"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("", 0))
        return int(s.getsockname()[1])


def _ports() -> list[str]:
    """Every port a node would otherwise take at its default (shared with any other Ray
    on the machine)."""
    flags = ("--node-manager-port", "--object-manager-port", "--metrics-export-port",
             "--dashboard-agent-listen-port", "--dashboard-agent-grpc-port",
             "--runtime-env-agent-port")  # fmt: skip
    return [f"{flag}={_free_port()}" for flag in flags]


def _start(args: list[str], env: dict, log: Path) -> subprocess.Popen:
    out = open(log, "w")  # kept open for the process's lifetime
    # its own session: the node's processes (raylet, agents, workers) share one group
    return subprocess.Popen(
        [RAY, "start", *args, "--block"], env=env, stdout=out, stderr=out, start_new_session=True
    )


def _wait(condition, what: str, timeout: float = 120.0, procs=()):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        for p in procs:
            if p.poll() is not None:
                raise RuntimeError(f"{what}: `ray start` exited with {p.returncode}")
        time.sleep(0.5)
    raise TimeoutError(f"{what} within {timeout:.0f} s")


def _kill_node(proc: subprocess.Popen) -> None:
    """SIGKILL to every process of the node (`ray start` and all it started: raylet,
    agents, the workers' processes): a crash, not a shutdown."""
    psutil = pytest.importorskip("psutil")
    root = psutil.Process(proc.pid)
    for p in [*root.children(recursive=True), root]:
        try:
            p.kill()
        except psutil.NoSuchProcess:
            pass
    proc.wait()


def _stop(proc: subprocess.Popen) -> None:
    """SIGTERM to `ray start --block`: it stops the node's processes and exits."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """``(address, head, node2, env)``: a running 2-node cluster, this process joined."""
    if not IN_FRESH_PROCESS:
        pytest.skip("runs in a fresh process: test_the_cluster_tests_in_a_fresh_process")
    if ray.is_initialized():
        ray.shutdown()
    logs = tmp_path_factory.mktemp("ray_cluster")
    temp_dir = f"/tmp/ragen-ray-{os.getpid()}"  # Ray's sockets need a short path
    port = _free_port()
    address = f"{HOST}:{port}"
    token = secrets.token_hex(16)
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env.update(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=token, RAY_worker_niceness="0")
    common = ["--node-ip-address", HOST, "--temp-dir", temp_dir, "--disable-usage-stats"]
    head = _start(
        ["--head", f"--port={port}", "--num-cpus=2", "--include-dashboard=false",
         f"--ray-client-server-port={_free_port()}", *common, *_ports()],
        env, logs / "head.log",
    )  # fmt: skip
    node2 = None
    saved = {k: os.environ.get(k) for k in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN")}
    try:
        _wait(lambda: socket.socket().connect_ex((HOST, port)) == 0, "the head", procs=[head])
        node2 = _start(
            [f"--address={address}", "--num-cpus=1", *common, *_ports()],
            env, logs / "node2.log",
        )  # fmt: skip
        os.environ["RAY_AUTH_TOKEN"] = token  # the client side: connect() turns the mode on
        os.environ.pop("RAY_AUTH_MODE", None)
        from ragen.distributed.ray_setup import connect

        connect(address)
        _wait(lambda: sum(n["Alive"] for n in ray.nodes()) == 2, "2 nodes", procs=[node2])
        yield address, head, node2, env
    finally:
        ray.shutdown()
        for proc in (node2, head):
            if proc is not None:
                _stop(proc)
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def _node_ids():
    """``{node id: is the head}`` of the alive nodes."""
    return {
        n["NodeID"]: "node:__internal_head__" in n["Resources"] for n in ray.nodes() if n["Alive"]
    }


def _train_args(model_dir, run_dir, address):
    return [
        "train",
        "env=sokoban",
        "algo=starpo-s",
        f"model.path={model_dir}",
        "rollout.env_groups=2",
        "rollout.group_size=2",
        "rollout.max_turns=2",
        "rollout.max_new_tokens=12",
        "rollout.max_model_len=1024",
        "algo.filter.value=1.0",
        "algo.ppo_mini_batch_size=4",
        "trainer.total_steps=1",
        "trainer.val_every=0",
        "trainer.reasoning_samples=0",
        "trainer.console=false",
        "trainer.tensorboard=false",
        f"trainer.run_dir={run_dir}",
        f"trainer.ray_address={address}",
        "trainer.rollout_workers=2",
        "trainer.train_ranks=2",
    ]


@pytest.mark.slow
def test_train_across_both_nodes(cluster, tiny_model_dir, tmp_path):
    import json

    address, *_ = cluster
    run = tmp_path / "run"
    assert main(_train_args(tiny_model_dir, run, address)) == 0
    (step,) = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert step["scale/worker_nodes"] == 2.0  # a rollout worker on each node
    assert step["scale/update_ranks"] == 2.0
    assert (run / "checkpoints" / "step_000001" / "actor" / "config.json").exists()


@pytest.mark.slow
def test_join_refused_without_the_token_names_authentication(cluster):
    """A client that does not authenticate (explicitly) is told so, not "start it"."""
    address, _, _, env = cluster
    code = (
        "from ragen.distributed.ray_setup import connect\n"
        "from ragen.errors import ConfigError\n"
        f"try:\n    connect({address!r})\nexcept ConfigError as e:\n    print('ERROR', e)\n"
    )
    child_env = {**env, "RAY_AUTH_MODE": "disabled", "PYTHONPATH": os.getcwd()}
    child_env["RAY_gcs_rpc_server_connect_timeout_s"] = "3"  # Ray's retries: 20 s by default
    child_env.pop("RAY_AUTH_TOKEN")
    out = subprocess.run(
        [sys.executable, "-c", code], env=child_env, capture_output=True, text=True, timeout=180
    ).stdout
    assert "ERROR could not join the Ray cluster" in out
    assert "requires token authentication" in out and "RAY_AUTH_MODE=disabled" in out


def test_join_with_nothing_listening_says_so(monkeypatch):
    from ragen.distributed.ray_setup import join

    port = _free_port()  # bound and released: nothing listens there now
    with pytest.raises(ConfigError, match=r"nothing answers there .*ray start --head"):
        join(ray, f"{HOST}:{port}")


@pytest.mark.slow
def test_killing_the_second_node_replays_its_groups(cluster, tiny_model_dir):
    """Last in this module: the second node does not come back."""
    from ragen.agent.env_manager import EnvStateManager
    from ragen.agent.policies import ModelPolicy
    from ragen.agent.rollout import RolloutConfig, run_rollout
    from ragen.distributed.rollout_workers import RolloutWorkerPool
    from ragen.engines.hf import HFEngine
    from ragen.models import load_policy

    _, _, node2, _ = cluster
    heads = {nid for nid, is_head in _node_ids().items() if is_head}
    cfg = RolloutConfig(env_groups=3, group_size=2, max_turns=2, max_new_tokens=12, seed=7)
    manager = EnvStateManager("sokoban", {}, env_groups=3, group_size=2)
    seeds = manager.seeds_for_step(0)
    model, tokenizer = load_policy(tiny_model_dir, device="cpu", dtype=torch.float32)
    expected = run_rollout(ModelPolicy(HFEngine(model, tokenizer), tokenizer), manager, cfg, seeds)
    pool = RolloutWorkerPool(
        ray, 2, model_path=tiny_model_dir, lora=None, device="cpu", dtype=torch.float32,
        resources={"num_cpus": 1.0, "num_gpus": 0.0},
    )  # fmt: skip
    try:
        (on_node2,) = [w for w, node in enumerate(pool.nodes) if node not in heads]

        def kill_node2(worker, pid):
            if worker == on_node2:
                _kill_node(node2)  # the node dies with the worker's rollout in flight

        pool.on_dispatch = kill_node2
        result = pool.collect(model, manager, cfg, seeds)
    finally:
        pool.close()
    (event,) = pool.events
    assert event["worker"] == on_node2 and event["new_node"] in heads
    assert event["dead_node"] not in heads
    assert event["groups"] == ([2] if on_node2 == 1 else [0, 1])
    assert len(result.trajectories) == len(expected.trajectories) == 6
    for x, y in zip(expected.trajectories, result.trajectories):
        assert (x.group_id, x.episode_id) == (y.group_id, y.episode_id)
        assert x.input_ids == y.input_ids and x.end_reason == y.end_reason


def test_the_cluster_tests_in_a_fresh_process():
    """This module's cluster tests, in a process whose first Ray is the cluster's."""
    if IN_FRESH_PROCESS:
        pytest.skip("this is the fresh process")
    env = {**os.environ, "RAGEN_RAY_CLUSTER_CHILD": "1"}
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", __file__],
        env=env, capture_output=True, text=True, timeout=1200,
    )  # fmt: skip
    assert out.returncode == 0, out.stdout[-6000:] + out.stderr[-2000:]
    assert " passed" in out.stdout and "skipped" in out.stdout  # the runner skips itself
