"""Every ragen environment served over OpenEnv (``ragen serve-env NAME --protocol openenv``).

`OpenEnv <https://github.com/meta-pytorch/OpenEnv>`_ (``openenv-core`` on PyPI; Meta and
Hugging Face) is the environment protocol TRL and Hugging Face's environment hub use:
``reset`` / ``step`` / ``state`` over HTTP and a WebSocket session per client, with
typed (pydantic) actions, observations and state. This module wraps a ragen env in
``openenv-core``'s own ``Environment`` interface and serves it with ``openenv-core``'s
FastAPI app (``create_app``) under uvicorn, so any OpenEnv client works with it,
``GenericEnvClient`` and TRL's included::

    from openenv.core import GenericEnvClient

    with GenericEnvClient(base_url="http://127.0.0.1:8000").sync() as env:
        result = env.reset(seed=3)
        print(result.observation["text"])            # the ragen observation
        result = env.step({"action": "up"})
        result.reward, result.done                    # done = terminated or truncated

The types, as ``GET /schema`` reports them:

* :class:`RagenAction`: ``{"action": "<one action string>"}``;
* :class:`RagenObservation`: ``text`` (the observation), ``terminated``, ``truncated``,
  ``info`` (with ``action_is_valid``, ``action_is_effective``, ``success``),
  ``action_names`` (the vocabulary, None for free-form answers), ``instructions`` (on
  reset only) and ``seed``; OpenEnv's ``reward`` and ``done`` ride beside it;
* :class:`RagenState`: ``episode_id``, ``step_count``, ``env_name``, ``seed``, the end
  flags, ``success``, and, computed when asked, ``oracle_action`` and a ``snapshot``.

``reset`` takes OpenEnv's ``seed`` (a fresh random one when omitted, reported back in the
observation) and ``episode_id`` (a fresh one when omitted, in the state), plus ragen's
``rng_seed`` (the dynamics seed of a group member); a seed that is not an integer (NaN,
``"x"``) is a 400 naming it. ``state.step_count`` counts the steps that played an action:
an invalid action changes nothing (the env contract), so it counts neither there nor in
``info["steps"]``, and the two agree. Every WebSocket session holds its own env instance;
``max_sessions`` caps them. OpenEnv's stateless ``POST /reset`` and ``POST /step`` build a
fresh env per request (as ``openenv-core`` does for every environment): episodes need
the WebSocket session, and a ``step`` before any ``reset`` (stateless, or first on a
session) is a 409 naming that, never a move in a room nobody seeded.

**Protections** (:class:`AppServer`, for any OpenEnv app, ours or a user's), the rules of
:mod:`ragen.envs.serving.rules` that ``ragen serve-env``'s own protocol enforces too: a token
(``Authorization: Bearer``, on HTTP requests and the WebSocket handshake; 401
otherwise), request bodies and WebSocket messages of at most 1 MiB (413 at once, the body
unread), ``read_timeout`` for a connection to send its request (then it is closed; a
body that stalls gets 408), at most ``max_threads`` HTTP connections at once (more are
answered 503; a WebSocket session counts against ``max_sessions`` instead), a session
idle for ``episode_timeout`` seconds closed (code 1001) so its slot is free again, and
errors as one line: a request the app rejects is a 4xx with a one-line ``detail``, an
exception a one-line log entry and a 500, never a traceback.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import random
import threading
import time
import uuid
from typing import Any

from ragen.errors import MissingDependencyError

from ..base import Env
from ..registry import make, spec
from .rules import (
    BODY_TOO_LARGE,
    BUSY,
    MAX_BODY_BYTES,
    UNAUTHORIZED,
    RequestError,
    ServerLimits,
    authorized,
    http_url,
    int_field,
    listening_socket,
    read_timeout_text,
    resolve_token,
    warn_if_exposed,
)
from .wire import jsonable

log = logging.getLogger(__name__)

PROTOCOL = "ragen-openenv/1"  # marks a ragen env in its observations (the client reads it)


def import_openenv() -> Any:
    """``openenv.core``, or a one-line error naming the pip extra."""
    try:
        import openenv.core as core
    except ImportError as err:
        raise MissingDependencyError(
            "openenv-core is not installed; install it with: pip install 'ragen[openenv]'"
        ) from err
    return core


@functools.cache
def openenv_types() -> tuple[type, type, type, type]:
    """``(RagenAction, RagenObservation, RagenState, RagenEnvironment)``, built on first
    use: importing openenv-core takes seconds, which ``ragen.envs`` must not pay."""
    core = import_openenv()
    from pydantic import Field

    class RagenAction(core.Action):
        """One action of a ragen environment, as its instructions describe it."""

        action: str = Field(..., description="one action, e.g. 'up' or '(3 + 5) * 2'")

    class RagenObservation(core.Observation):
        """A ragen observation; ``reward`` and ``done`` are OpenEnv's own fields."""

        text: str = Field("", description="the observation text")
        terminated: bool = Field(False, description="the episode reached a terminal state")
        truncated: bool = Field(False, description="the env cut the episode (step limit)")
        info: dict[str, Any] = Field(
            default_factory=dict, description="action_is_valid, action_is_effective, success"
        )
        action_names: list[str] | None = Field(None, description="the action vocabulary")
        instructions: str = Field("", description="rules and action format (on reset)")
        seed: int | None = Field(None, description="the initial-state seed of the episode")
        state_key: str | None = Field(
            None, description="the initial state's key for train/validation splits (on reset)"
        )
        protocol: str = Field(PROTOCOL, description="ragen's OpenEnv observation format")

    class RagenState(core.State):
        """The episode's bookkeeping; ``oracle_action`` and ``snapshot`` are computed when
        the state is asked for."""

        env_name: str = ""
        seed: int | None = None
        rng_seed: int | None = None
        terminated: bool = False
        truncated: bool = False
        success: bool = False
        oracle_action: str | None = None
        snapshot: str = ""

    class RagenEnvironment(core.Environment):
        """A registered ragen env behind OpenEnv's ``Environment`` interface."""

        SUPPORTS_CONCURRENT_SESSIONS = True  # every session builds its own env instance

        def __init__(self, name: str, config: dict[str, Any] | None = None) -> None:
            super().__init__()
            self.env_name = name
            self.env: Env = make(name, **dict(config or {}))
            self._state = RagenState(env_name=name)

        def reset(
            self,
            seed: int | None = None,
            episode_id: str | None = None,
            rng_seed: int | None = None,
            **kwargs: Any,
        ) -> RagenObservation:
            fields = {"seed": seed, "rng_seed": rng_seed}
            seed = int_field(fields, "seed", required=False)  # NaN, "x": a 400, not a 500
            rng_seed = int_field(fields, "rng_seed", required=False)
            if seed is None:  # OpenEnv clients may not pass one: draw it, and say which
                seed = random.SystemRandom().randrange(2**31)
            if episode_id is not None and not isinstance(episode_id, str):
                raise RequestError(400, f"episode_id must be a string, got {episode_id!r}")
            text = self.env.reset(seed, rng_seed=rng_seed)
            self._state = RagenState(
                episode_id=episode_id or uuid.uuid4().hex,
                env_name=self.env_name,
                seed=int(seed),
                rng_seed=rng_seed,
                truncated=self.env.truncated,
            )
            return RagenObservation(
                text=text,
                instructions=self.env.instructions,
                action_names=self.env.action_names,
                seed=int(seed),
                state_key=self.env.state_key(),
                reward=0.0,
                done=self.env.done,
                truncated=self.env.truncated,
            )

        def step(
            self, action: RagenAction, timeout_s: float | None = None, **kwargs: Any
        ) -> RagenObservation:
            if self._state.seed is None:
                raise RequestError(
                    409,
                    "no episode: reset first (OpenEnv's stateless POST /step plays a fresh, "
                    "never reset env; episodes need the WebSocket session, /ws)",
                )
            text, reward, terminated, truncated, info = self.env.step(action.action)
            if info.get("action_is_valid", True):  # as info["steps"]: an invalid action
                self._state.step_count += 1  # changed nothing, so it is no step
            self._state.terminated, self._state.truncated = terminated, truncated
            self._state.success = self.env.success
            return RagenObservation(
                text=text,
                reward=float(reward),
                done=bool(terminated or truncated),
                terminated=bool(terminated),
                truncated=bool(truncated),
                info=jsonable(info),
                action_names=self.env.action_names,
                seed=self._state.seed,
            )

        @property
        def state(self) -> RagenState:
            if self._state.seed is not None:  # an episode exists (stateless GET /state: none)
                self._state.oracle_action = None if self.env.done else self.env.oracle_action()
                self._state.snapshot = repr(self.env.snapshot())
            return self._state

        def get_metadata(self) -> Any:
            from openenv.core.env_server.types import EnvironmentMetadata

            return EnvironmentMetadata(
                name=f"ragen:{self.env_name}",
                description=spec(self.env_name).description,
                readme_content=self.env.instructions,
            )

        def close(self) -> None:
            self.env.close()

    return RagenAction, RagenObservation, RagenState, RagenEnvironment


def create_openenv_app(
    name: str, config: dict[str, Any] | None = None, max_sessions: int = 256
) -> Any:
    """The FastAPI app (``openenv-core``'s ``create_app``) serving env ``name``, whose
    rejected requests are 4xx answers with a one-line ``detail``."""
    core = import_openenv()
    action_cls, observation_cls, _, environment_cls = openenv_types()
    config = dict(config or {})
    make(name, **config).close()  # a bad name or config fails here, in one line
    factory = functools.partial(environment_cls, name, config)
    app = core.create_app(
        factory, action_cls, observation_cls, env_name=name, max_concurrent_envs=max_sessions
    )
    one_line_errors(app)
    return app


def one_line_errors(app: Any) -> None:
    """Answer ``app``'s rejected requests in one line: a :class:`RequestError` with its
    status, and FastAPI's 422 without echoing the input (its default handler echoes it,
    and a NaN in the input made that answer a 500 with a traceback)."""
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import JSONResponse

    async def request_error(request: Any, err: RequestError) -> Any:
        return JSONResponse({"detail": str(err)}, status_code=err.status)

    async def validation_error(request: Any, err: RequestValidationError) -> Any:
        problems = "; ".join(
            f"{'.'.join(str(part) for part in e.get('loc', ()))}: {e.get('msg', '')}"
            for e in err.errors()
        )
        return JSONResponse({"detail": problems or "invalid request"}, status_code=422)

    app.add_exception_handler(RequestError, request_error)
    app.add_exception_handler(RequestValidationError, validation_error)


async def _send_json(send: Any, status: int, detail: str) -> None:
    """An HTTP error answer ``{"detail": ...}`` (OpenEnv's, FastAPI's error shape) that
    ends the connection: the request's body may be left unread."""
    body = json.dumps({"detail": detail}).encode()
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        (b"connection", b"close"),
    ]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


class GuardedApp:
    """An ASGI app (any OpenEnv app) behind the protections of :mod:`ragen.envs.serving.rules`:
    the token, the body limit, the body's read timeout, the idle timeout of a WebSocket
    session, and one-line logs instead of tracebacks. (The request head's read timeout
    and the connection cap are the protocol's: :func:`guarded_protocol`.)"""

    def __init__(
        self, app: Any, token: str | None, read_timeout: float, episode_timeout: float
    ) -> None:
        self.app, self.token = app, token
        self.read_timeout, self.episode_timeout = read_timeout, episode_timeout

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            await self._http(scope, receive, send)
        elif scope["type"] == "websocket":
            await self._websocket(scope, receive, send)
        else:  # lifespan
            await self.app(scope, receive, send)

    def _authorized(self, scope: Any) -> bool:
        return authorized(dict(scope["headers"]).get(b"authorization"), self.token)

    async def _http(self, scope: Any, receive: Any, send: Any) -> None:
        if not self._authorized(scope):
            await _send_json(send, 401, UNAUTHORIZED)
            return
        length = dict(scope["headers"]).get(b"content-length", b"0")
        if length.isdigit() and int(length) > MAX_BODY_BYTES:  # h11 rejects bad lengths
            await _send_json(send, 413, BODY_TOO_LARGE)  # unread; the connection closes
            return
        # the whole body, read before the app sees it: at most MAX_BODY_BYTES (a chunked
        # body has no length to check first) and within read_timeout in all
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.read_timeout
        body, more = bytearray(), True
        while more:
            try:
                message = await asyncio.wait_for(receive(), max(deadline - loop.time(), 0))
            except asyncio.TimeoutError:
                await _send_json(send, 408, read_timeout_text(self.read_timeout))
                return
            if message["type"] == "http.disconnect":
                return
            body += message.get("body", b"")
            more = message.get("more_body", False)
            if len(body) > MAX_BODY_BYTES:
                await _send_json(send, 413, BODY_TOO_LARGE)
                return
        replayed = False

        async def replay() -> Any:
            nonlocal replayed
            if replayed:
                return await receive()
            replayed = True
            return {"type": "http.request", "body": bytes(body), "more_body": False}

        try:
            await self.app(scope, replay, send)
        except Exception as err:  # noqa: BLE001 - the app answered 500 already; one line
            log.warning(
                "openenv server: %s %s failed: %s: %s",
                scope.get("method"),
                scope.get("path"),
                type(err).__name__,
                str(err).splitlines()[0] if str(err) else "",
            )

    async def _websocket(self, scope: Any, receive: Any, send: Any) -> None:
        from starlette.websockets import WebSocketDisconnect

        if not self._authorized(scope):
            if "websocket.http.response" in scope.get("extensions", {}):
                body = json.dumps({"detail": UNAUTHORIZED}).encode()
                start = {"type": "websocket.http.response.start", "status": 401}
                await send({**start, "headers": [(b"content-type", b"application/json")]})
                await send({"type": "websocket.http.response.body", "body": body})
            else:
                await send({"type": "websocket.close", "code": 1008})  # a 403 handshake
            return
        closed = False

        async def idle_receive() -> Any:
            """The client's next message; after ``episode_timeout`` s without one the
            session is closed (1001) and the app told the client left, so it frees the
            session's slot and env."""
            nonlocal closed
            try:
                return await asyncio.wait_for(receive(), self.episode_timeout)
            except asyncio.TimeoutError:
                closed = True
                reason = f"idle over {self.episode_timeout:g}s; the session is closed"
                await send({"type": "websocket.close", "code": 1001, "reason": reason})
                return {"type": "websocket.disconnect", "code": 1001}

        async def guarded_send(message: Any) -> None:
            if not closed:  # after an idle close the app's goodbyes have nowhere to go
                await send(message)

        try:
            await self.app(scope, idle_receive, guarded_send)
        except WebSocketDisconnect:
            # openenv-core 0.3's handler closes the socket after the client's ``close``
            # message, when the client has closed it already: not an error
            pass
        except Exception as err:  # noqa: BLE001 - a session's failure, in one line
            log.warning(
                "openenv server: a WebSocket session failed: %s: %s", type(err).__name__, err
            )


def guarded_protocol(read_timeout: float, max_connections: int) -> type:
    """uvicorn's HTTP protocol (h11) with two bounds: a connection that has not sent a
    whole request head ``read_timeout`` s after it opened (or after its last answer) is
    closed, however slowly it trickles bytes; and at most ``max_connections`` HTTP
    connections are open at once (more are answered 503 and closed). A connection that
    becomes a WebSocket session leaves both (``max_sessions`` bounds those)."""
    import h11
    from uvicorn.protocols.http.h11_impl import H11Protocol

    busy = json.dumps({"detail": BUSY}).encode()
    refusal = (
        b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n"
        + f"content-length: {len(busy)}\r\nconnection: close\r\n\r\n".encode()
        + busy
    )
    open_now = [0]  # the HTTP connections of this server, across its protocol instances

    class GuardedH11(H11Protocol):
        _counted = False
        _timer: asyncio.TimerHandle | None = None

        def connection_made(self, transport: Any) -> None:
            super().connection_made(transport)
            if open_now[0] >= max_connections:
                transport.write(refusal)
                transport.close()
                return
            open_now[0] += 1
            self._counted = True
            self._idle_since = self.loop.time()
            self._timer = self.loop.call_later(read_timeout, self._check_idle)

        def _waiting(self) -> bool:
            """No request is being read or answered: only a request head can come."""
            return self.conn.their_state is h11.IDLE and (
                self.cycle is None or self.cycle.response_complete
            )

        def _check_idle(self) -> None:
            if self.transport.is_closing():
                return
            delay = read_timeout
            if self._waiting():
                waited = self.loop.time() - self._idle_since
                if waited >= read_timeout:
                    self.transport.close()
                    return
                delay = read_timeout - waited
            self._timer = self.loop.call_later(delay, self._check_idle)

        def on_response_complete(self) -> None:
            self._idle_since = self.loop.time()
            super().on_response_complete()

        def _leave(self) -> None:
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
            if self._counted:
                self._counted = False
                open_now[0] -= 1

        def handle_websocket_upgrade(self, event: Any) -> None:
            self._leave()
            super().handle_websocket_upgrade(event)

        def connection_lost(self, exc: Exception | None) -> None:
            self._leave()
            super().connection_lost(exc)

    return GuardedH11


class AppServer:
    """An ASGI app (an OpenEnv ``create_app`` app) under uvicorn on ``host:port``, behind
    :class:`GuardedApp` and :func:`guarded_protocol`: ``with AppServer(app) as server:
    server.url``. ``port=0`` picks a free port. ``serve_forever()`` blocks; ``start()``
    serves from a background thread (tests, notebooks) and ``stop()`` shuts it down. A bad
    limit, a port in use or a host that is not this machine's is a one-line
    :class:`~ragen.errors.UsageError` here, before anything is served."""

    def __init__(
        self,
        app: Any,
        host: str = "127.0.0.1",
        port: int = 0,
        quiet: bool = True,
        token: str | None = None,
        limits: ServerLimits | None = None,
    ):
        import uvicorn

        limits = limits or ServerLimits()
        limits.check_descriptors(per_episode=True)  # every session is a connection
        self.app = GuardedApp(app, token or None, limits.read_timeout, limits.episode_timeout)
        self.token = token or None
        # clients queue from now on, before uvicorn's loop runs
        self._socket = listening_socket(host, port)
        uv_config = uvicorn.Config(
            self.app,
            http=guarded_protocol(limits.read_timeout, limits.max_threads),
            log_level="warning" if quiet else "info",
            access_log=not quiet,
            ws="auto",
            ws_max_size=MAX_BODY_BYTES,  # a bigger message closes the session (1009)
            timeout_graceful_shutdown=2,  # open sessions do not hold a shutdown forever
        )
        self.server = uvicorn.Server(uv_config)
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return http_url(*self._socket.getsockname()[:2])

    def serve_forever(self) -> None:
        try:
            self.server.run(sockets=[self._socket])  # uvicorn handles Ctrl-C and returns
        finally:
            self._socket.close()

    def start(self, timeout: float = 30.0) -> AppServer:
        self._thread = threading.Thread(target=self.serve_forever, daemon=True)
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self.server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"the server at {self.url} did not start")
            time.sleep(0.02)
        return self

    def stop(self) -> None:
        self.server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=10)

    def __enter__(self) -> AppServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class OpenEnvServer(AppServer):
    """A running OpenEnv server for one ragen env
    (``with OpenEnvServer("sokoban") as server: server.url``); ``max_sessions`` is the
    episodes (WebSocket sessions) held at once."""

    def __init__(
        self,
        name: str,
        config: dict[str, Any] | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        max_sessions: int = 256,
        quiet: bool = True,
        token: str | None = None,
        read_timeout: float = 30.0,
        max_threads: int = 128,
        episode_timeout: float = 3600.0,
    ) -> None:
        limits = ServerLimits(read_timeout, max_threads, max_sessions, episode_timeout)
        app = create_openenv_app(name, config, max_sessions)
        super().__init__(app, host, port, quiet, token, limits)


def serve_openenv(
    name: str,
    config: dict[str, Any] | None = None,
    host: str = "127.0.0.1",
    port: int = 8000,
    max_sessions: int = 256,
    quiet: bool = False,
    token: str | None = None,
    read_timeout: float = 30.0,
    max_threads: int = 128,
    episode_timeout: float = 3600.0,
) -> None:
    """Serve ``name`` over OpenEnv until interrupted (``ragen serve-env --protocol
    openenv``); ``token`` defaults to the ``RAGEN_ENV_TOKEN`` environment variable."""
    token = resolve_token(token)
    server = OpenEnvServer(
        name, config, host, port, max_sessions, quiet, token, read_timeout, max_threads,
        episode_timeout,
    )  # fmt: skip
    print(
        f"serving env {name!r} over OpenEnv at {server.url} (ws {server.url}/ws; train on it "
        f"with env=openenv env.config.url={server.url}); Ctrl-C stops",
        flush=True,
    )
    warn_if_exposed(host, token, server.url)
    started = time.time()
    try:
        server.serve_forever()
    finally:
        print(f"stopped after {time.time() - started:.0f}s", flush=True)
