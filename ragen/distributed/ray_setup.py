"""Import and connect to Ray: the one place that knows where the cluster is.

``trainer.ray_address`` (or ``$RAY_ADDRESS``) joins an existing cluster; without either a
local Ray instance starts in this process. A Ray that is already initialized (an
earlier trainer's in this process, a test's shared instance, a notebook) is used as it
is: Ray starts once per process.

Joining by address handles Ray's token authentication as Ray documents it
(:func:`token_auth_for_join`), and a join that fails says why (:func:`join`): nothing
listening at the address (checked first: Ray itself would wait minutes), or the cluster
refusing this process's authentication.
"""

from __future__ import annotations

import contextlib
import os
import socket
import sys
import tempfile
from pathlib import Path
from typing import Any

from ragen.errors import ConfigError
from ragen.trainer.config import INSTALL_HINT


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
    a training rank still start, and share the cores). A Ray already initialized in this
    process (an earlier trainer's, a notebook's) is reused as it is.
    """
    address = address or os.environ.get("RAY_ADDRESS") or None
    note = token_auth_for_join() if address else ""  # before Ray reads its config
    ray = import_ray()
    if ray.is_initialized():
        return ray
    if address:
        if note:
            print(note)
        join(ray, address)
        return ray
    cpus = max(float(os.cpu_count() or 1), float(logical_cpus))
    # Ray runs its workers at nice 15 by default; ours are the run's main work (the
    # trainer waits on them), so they get the trainer's priority
    os.environ.setdefault("RAY_worker_niceness", "0")
    ray.init(num_cpus=int(cpus + 0.999), include_dashboard=False, log_to_driver=True)
    return ray


# -- joining a cluster -------------------------------------------------------------------
AUTH_MODE = "RAY_AUTH_MODE"
TOKEN_DOC = "https://docs.ray.io/en/latest/ray-security/token-auth.html"


def token_source() -> str | None:
    """Where a Ray auth token would come from, in Ray's order ($RAY_AUTH_TOKEN,
    $RAY_AUTH_TOKEN_PATH, ~/.ray/auth_token), or None when there is none."""
    if os.environ.get("RAY_AUTH_TOKEN"):
        return "$RAY_AUTH_TOKEN"
    path = os.environ.get("RAY_AUTH_TOKEN_PATH")
    if path:
        return path if Path(path).is_file() else None
    default = Path.home() / ".ray" / "auth_token"
    return str(default) if default.is_file() else None


def token_auth_for_join() -> str:
    """Joining a cluster by address: Ray turns token authentication on by itself only for
    a local cluster it finds, never for an explicit address, while a head started by
    ``ray start`` with a token present enforces it. As Ray documents for the clients of
    such a cluster, set ``RAY_AUTH_MODE=token`` when a token is at hand and the mode is
    not chosen (a cluster without authentication accepts such a client too). Returns
    the line for the log ("" when nothing changed)."""
    if os.environ.get(AUTH_MODE) is not None:
        return ""
    source = token_source()
    if source is None:
        return ""
    os.environ[AUTH_MODE] = "token"
    if sys.modules.get("ray") is not None:  # Ray read its config at import: refresh it
        try:
            from ray._raylet import Config

            Config.initialize("")
        except Exception:  # an older Ray without token authentication
            pass
    return (
        f"joining the Ray cluster with token authentication ({AUTH_MODE}=token, the token "
        f"from {source}); set {AUTH_MODE}=disabled to join without"
    )


def reachable(address: str, timeout: float = 5.0) -> str:
    """ "" when something accepts TCP connections at ``address`` (``host:port`` or
    ``ray://host:port``), else why not."""
    hostport = address.split("://", 1)[-1]
    host, _, port = hostport.rpartition(":")
    if not host or not port.isdigit():
        return f"{address!r} is not host:port"
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout):
            return ""
    except OSError as err:
        return err.strerror or type(err).__name__


def join(ray: Any, address: str) -> None:
    """``ray.init(address=...)``, with a one-line :class:`ConfigError` that names the
    cause when it fails: nothing listening there, or the cluster refusing this process's
    authentication (read from Ray's own log lines, which are echoed as they were)."""
    problem = reachable(address)
    if problem:
        raise ConfigError(
            f"could not join the Ray cluster at {address!r}: nothing answers there "
            f"({problem}). Fix: start the head node (`ray start --head --port=PORT`), or "
            "correct trainer.ray_address / $RAY_ADDRESS; leave both unset to start Ray locally"
        )
    try:
        with _captured_stderr() as log:
            ray.init(address=address, log_to_driver=True)
    except (ConnectionError, RuntimeError, ValueError) as err:
        if "Unauthenticated" in log.text or "InvalidAuthToken" in log.text:
            mode = os.environ.get(AUTH_MODE)
            source = token_source()
            if mode != "token":
                why = f"this process does not authenticate ({AUTH_MODE}={mode or 'unset'})"
                fix = f"set {AUTH_MODE}=token with the head's token"
            elif source is None:
                why = "this process has no token"
                fix = "put the head's token in $RAY_AUTH_TOKEN or ~/.ray/auth_token"
            else:
                why = f"the token from {source} is not the cluster's"
                fix = "use the head's token ($RAY_AUTH_TOKEN or ~/.ray/auth_token)"
            raise ConfigError(
                f"could not join the Ray cluster at {address!r}: it requires token "
                f"authentication and {why}. Fix: {fix}; `ray get-auth-token` on the head "
                f"prints it ({TOKEN_DOC})"
            ) from None
        raise ConfigError(
            f"could not join the Ray cluster at {address!r}: {err}. Fix: check that it is "
            "a Ray head's address (`ray status` on the head), or correct "
            "trainer.ray_address / $RAY_ADDRESS; leave both unset to start Ray locally"
        ) from None


class _Log:
    text = ""


@contextlib.contextmanager
def _captured_stderr():
    """Copy what this process writes to file descriptor 2 (Ray's C++ core logs there)
    while the block runs; it is still shown, after the block."""
    log = _Log()
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile(mode="w+b") as tmp:
        os.dup2(tmp.fileno(), 2)
        try:
            yield log
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            tmp.seek(0)
            data = tmp.read()
            log.text = data.decode(errors="replace")
            if data:
                os.write(2, data)


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
