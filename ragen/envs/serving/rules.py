"""What every env server of ragen enforces, whichever protocol it speaks.

``ragen serve-env NAME`` serves an env over two protocols: this project's JSON protocol
(:mod:`ragen.envs.serving.http_server`, threads, for ``env=remote``) and OpenEnv's HTTP + WebSocket
API (:mod:`ragen.envs.serving.openenv_server`, asyncio under uvicorn, for ``env=openenv`` and
TRL). They differ in how they serve, never in what a client may do to them, so the
rules live here, once:

* **a token**: with one set (``--token``, or :data:`TOKEN_ENV` on both sides) every
  request must carry ``Authorization: Bearer <token>`` (:func:`authorized`); without one
  a server reachable from other machines says so at start (:func:`warn_if_exposed`);
* **a body limit**: no request body (nor WebSocket message) over :data:`MAX_BODY_BYTES`
  is read; it is answered 413 at once (:data:`BODY_TOO_LARGE`);
* **limits** (:class:`ServerLimits`): a connection that has not sent its request within
  ``read_timeout`` seconds is closed; at most ``max_threads`` connections are served at
  once (more are answered 503, :data:`BUSY`); at most ``max_episodes`` episodes (OpenEnv:
  WebSocket sessions) are held; one idle for ``episode_timeout`` seconds is dropped.
  Bad values are one-line errors before the server binds;
* **one-line errors**: a port in use, an address that is not this machine's
  (:func:`bind_errors`), and request fields that are no integers (:func:`int_field`:
  a NaN or ``"x"`` seed is a 400 naming the field, never a 500 with a traceback).

The clients (:mod:`ragen.envs.serving.remote`, :mod:`ragen.envs.adapters.openenv_client`) share
:func:`check_reward`: a reward that is not a finite number of sane size ends the episode
as an env failure, never a silent 0 or a 1e308 that overflows the returns.
"""

from __future__ import annotations

import errno
import hmac
import ipaddress
import math
import os
import resource
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from ragen.errors import UsageError

#: the largest request body (and WebSocket message) a server reads; an action is at most
#: ``MAX_ACTION_CHARS`` (65,536) characters, 12 bytes each as JSON at worst, so every
#: valid request fits
MAX_BODY_BYTES = 1 << 20
#: the environment variable a token is read from (server and client) when none is given
TOKEN_ENV = "RAGEN_ENV_TOKEN"
#: rewards beyond this size are refused by the clients: no env of this project pays more
#: than a few dozen per step, and 1e308 turns a return into inf after one addition
MAX_ABS_REWARD = 1e6
#: file descriptors kept free for the server's own files, logs and listening socket
FD_RESERVE = 64

UNAUTHORIZED = "missing or wrong token (Authorization: Bearer ...)"
BUSY = "server busy: every request slot is in use; retry"
BODY_TOO_LARGE = f"request body over {MAX_BODY_BYTES} bytes"


class RequestError(Exception):
    """A request the server answers with an HTTP error status (``status``) and a
    one-line message: the client's mistake, never a traceback on the server."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def read_timeout_text(read_timeout: float) -> str:
    return f"the request did not arrive within {read_timeout:g}s"


@dataclass(frozen=True)
class ServerLimits:
    """The bounds of one server (``ragen serve-env`` flags of the same names); checked
    when made, so a bad one is a one-line :class:`~ragen.errors.UsageError`."""

    read_timeout: float = 30.0
    max_threads: int = 128
    max_episodes: int = 4096
    episode_timeout: float = 3600.0

    def __post_init__(self) -> None:
        for flag, value, fix in (
            ("--read-timeout", self.read_timeout, "e.g. --read-timeout 30"),
            ("--episode-timeout", self.episode_timeout, "e.g. --episode-timeout 3600"),
        ):
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise UsageError(f"{flag} {value!r}: must be a number of seconds. Fix: {fix}")
            if not (value > 0 and math.isfinite(value)):  # NaN fails both
                raise UsageError(f"{flag} {value:g}: must be a finite number of seconds > 0. Fix: {fix}")  # fmt: skip
        for flag, value, what, fix in (
            ("--max-threads", self.max_threads, "requests served at once", "--max-threads 128"),
            ("--max-episodes", self.max_episodes, "episodes held at once", "--max-episodes 4096"),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise UsageError(
                    f"{flag} {value!r}: must be an integer >= 1 ({what}). Fix: e.g. {fix}"
                )

    def check_descriptors(self, per_episode: bool) -> None:
        """Make sure the process may open a descriptor for every connection it admits
        (``max_threads``; with ``per_episode`` also one per episode: OpenEnv's sessions
        are WebSocket connections), raising the soft limit toward the hard one when it
        is short; a machine whose hard limit is too low is a one-line error, since the
        server would otherwise fail with EMFILE under load (``/health`` unanswered)."""
        needed = self.max_threads + (self.max_episodes if per_episode else 0) + FD_RESERVE
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft == resource.RLIM_INFINITY or needed <= soft:
            return
        if hard == resource.RLIM_INFINITY or needed <= hard:
            resource.setrlimit(resource.RLIMIT_NOFILE, (needed, hard))
            return
        room = max(hard - FD_RESERVE - self.max_threads, 0)
        episodes = f" and --max-episodes {self.max_episodes} sessions" if per_episode else ""
        raise UsageError(
            f"--max-threads {self.max_threads}{episodes} need {needed} file descriptors; "
            f"this process may open {hard} (ulimit -Hn). Fix: "
            + (f"--max-episodes {room} or fewer, " if per_episode and room else "")
            + "lower --max-threads, or raise the limit (ulimit -n)"
        )


def resolve_token(token: str | None) -> str | None:
    """``token``, else :data:`TOKEN_ENV` from the environment; None when neither is set."""
    return token or os.environ.get(TOKEN_ENV) or None


def authorized(header: str | bytes | None, token: str | None) -> bool:
    """Whether an ``Authorization`` header carries ``token`` (always, without a token),
    compared in constant time."""
    if token is None:
        return True
    sent = header.encode() if isinstance(header, str) else (header or b"")
    return hmac.compare_digest(sent, f"Bearer {token}".encode())


def auth_headers(token: str | None) -> dict[str, str]:
    """The header a client sends with ``token`` (none without one)."""
    return {"Authorization": f"Bearer {token}"} if token else {}


def is_loopback(host: str) -> bool:
    """Whether ``host`` only accepts connections from this machine."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def warn_if_exposed(host: str, token: str | None, url: str) -> None:
    """Say so when a server without a token listens where other machines reach it."""
    if token is None and not is_loopback(host):
        print(
            f"warning: {host} is reachable from other machines and no token is set: anyone "
            f"who reaches {url} can play and close episodes. Fix: --token SECRET (or "
            f"{TOKEN_ENV}=SECRET) here and in the client's environment",
            flush=True,
        )


def http_url(host: str, port: int) -> str:
    """``http://HOST:PORT``, an IPv6 host in brackets."""
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


@contextmanager
def bind_errors(host: str, port: int) -> Iterator[None]:
    """Turn the errors of binding ``host:port`` into one-line :class:`UsageError`\\ s
    naming the fix (a port in use, a host that is not an address of this machine)."""
    try:
        yield
    except socket.gaierror as err:
        raise UsageError(
            f"--host {host!r} is not an address of this machine ({err.strerror}). "
            "Fix: --host 127.0.0.1 (this machine) or --host 0.0.0.0 (all interfaces)"
        ) from None
    except OSError as err:
        if err.errno == errno.EADDRINUSE:
            raise UsageError(
                f"port {port} on {host} is already in use (another `ragen serve-env`?). "
                "Fix: another --port, or --port 0 for any free port"
            ) from None
        if err.errno in (errno.EACCES, errno.EADDRNOTAVAIL, errno.EAFNOSUPPORT):
            raise UsageError(
                f"cannot listen on {host}:{port} ({err.strerror}). Fix: a port above 1023 "
                "and an address of this machine, e.g. --host 127.0.0.1 --port 8765"
            ) from None
        raise


def listening_socket(host: str, port: int, backlog: int = 1024) -> socket.socket:
    """A TCP socket listening on ``host:port`` (IPv4 or IPv6, as ``host`` resolves),
    with binding errors as one-line :class:`UsageError`\\ s (:func:`bind_errors`)."""
    with bind_errors(host, port):
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
        sock = socket.socket(family, kind, proto)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(address)
            sock.listen(backlog)
        except BaseException:
            sock.close()
            raise
    return sock


def int_field(body: dict[str, Any], key: str, required: bool = True) -> int | None:
    """``body[key]`` as an integer (a JSON integer, never a bool, float, NaN or string);
    None when absent and not ``required``; else :class:`RequestError` 400 naming it."""
    value = body.get(key)
    if value is None and not required:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        shown = repr(value) if not isinstance(value, str) else repr(value[:40])
        what = "an integer" if required else "an integer or null"
        raise RequestError(400, f"{key} must be {what}, got {shown}")
    return value


def check_reward(value: Any, where: str) -> float:
    """``value`` as a float when it is a finite number of at most :data:`MAX_ABS_REWARD`;
    else a ``ValueError`` naming it (the client ends the episode as an env failure)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{where}: the reward is not a number: {value!r}")
    try:
        reward = float(value)
    except OverflowError:  # an integer beyond the float range
        reward = math.inf
    if not math.isfinite(reward):
        raise ValueError(f"{where}: the reward is not a finite number: {value!r}")
    if abs(reward) > MAX_ABS_REWARD:
        raise ValueError(
            f"{where}: the reward {reward:g} is beyond +-{MAX_ABS_REWARD:g}, which no env "
            "pays per step (sums of such rewards overflow to inf)"
        )
    return reward
