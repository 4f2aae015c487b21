"""Import and connect to Ray: the one place that knows where the cluster is.

``trainer.ray_address`` (or ``$RAY_ADDRESS``) joins an existing cluster; without either a
local Ray instance starts in this process. A Ray that is already initialized (a test's
shared instance, a notebook) is used as it is.
"""

from __future__ import annotations

import os
from typing import Any

from ragen.errors import ConfigError

INSTALL_HINT = "pip install 'ragen[scale]'"


def ray_installed() -> bool:
    """Whether ``import ray`` would work, without importing it (config validation)."""
    import importlib.util
    import sys

    if "ray" in sys.modules:
        return sys.modules["ray"] is not None
    return importlib.util.find_spec("ray") is not None


def import_ray(what: str = "trainer.rollout_workers / trainer.train_ranks") -> Any:
    """``import ray``, or a one-line :class:`ConfigError` that names the extra to install."""
    try:
        import ray
    except ImportError:
        raise ConfigError(
            f"{what} needs Ray, which is not installed. Fix: {INSTALL_HINT} "
            "(or set trainer.rollout_workers=0 trainer.train_ranks=1 to run in one process)"
        ) from None
    return ray


def connect(address: str | None, logical_cpus: float = 0.0) -> Any:
    """Connect to Ray and return the module.

    ``address``: a cluster address (``ray://host:10001`` or ``host:6379``); None uses
    ``$RAY_ADDRESS`` when set, else starts a local instance. ``logical_cpus``: what the
    actors of this run reserve; a local instance declares at least that many CPUs (they
    are logical slots for placement, not cores: on a 2-core machine 2 rollout workers and
    a training rank still start, and share the cores).
    """
    ray = import_ray()
    if ray.is_initialized():
        return ray
    address = address or os.environ.get("RAY_ADDRESS") or None
    if address:
        try:
            ray.init(address=address, log_to_driver=True)
        except (ConnectionError, RuntimeError, ValueError) as err:
            raise ConfigError(
                f"could not join the Ray cluster at {address!r}: {err}. Fix: start it "
                "(`ray start --head` on the head node) or correct trainer.ray_address / "
                "$RAY_ADDRESS; leave both unset to start Ray locally"
            ) from None
        return ray
    cpus = max(float(os.cpu_count() or 1), float(logical_cpus))
    # Ray runs its workers at nice 15 by default; ours are the run's main work (the
    # trainer waits on them), so they get the trainer's priority
    os.environ.setdefault("RAY_worker_niceness", "0")
    ray.init(num_cpus=int(cpus + 0.999), include_dashboard=False, log_to_driver=True)
    return ray


def wait_ready(ray: Any, refs: list, what: str, resources: dict[str, float], timeout: float):
    """``ray.get(refs)`` with a clear error when the actors cannot be placed in time
    (the cluster lacks the CPUs/GPUs they reserve)."""
    ready, pending = ray.wait(refs, num_returns=len(refs), timeout=timeout)
    if pending:
        have = ray.cluster_resources()
        raise ConfigError(
            f"Ray could not start {len(pending)} of {len(refs)} {what} within {timeout:.0f} s: "
            f"each reserves {resources}, the cluster has "
            f"{ {k: v for k, v in have.items() if k in ('CPU', 'GPU')} }. Fix: lower "
            "trainer.worker_cpus / trainer.worker_gpus, use fewer workers or ranks, or add nodes"
        )
    return ray.get(ready)


def actor_resources(cpus: float, gpus: float | None, device_type: str) -> dict[str, float]:
    """Ray resources of one worker or rank: ``worker_gpus`` null means one GPU each when
    the trainer runs on CUDA, none otherwise."""
    if gpus is None:
        gpus = 1.0 if device_type == "cuda" else 0.0
    return {"num_cpus": float(cpus), "num_gpus": float(gpus)}
