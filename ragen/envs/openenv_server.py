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
observation) and ``episode_id``, plus ragen's ``rng_seed`` (the dynamics seed of a group
member). Every WebSocket session holds its own env instance; ``max_sessions`` caps them.
OpenEnv's stateless ``POST /reset`` and ``POST /step`` build a fresh env per request (as
``openenv-core`` does for every environment): episodes need the WebSocket session.
"""

from __future__ import annotations

import functools
import random
import socket
import threading
import time
from typing import Any

from ragen.errors import MissingDependencyError

from .base import Env
from .registry import make, spec

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
            if seed is None:  # OpenEnv clients may not pass one: draw it, and say which
                seed = random.SystemRandom().randrange(2**31)
            text = self.env.reset(int(seed), rng_seed=rng_seed)
            self._state = RagenState(
                episode_id=episode_id,
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
            text, reward, terminated, truncated, info = self.env.step(action.action)
            self._state.step_count += 1
            self._state.terminated, self._state.truncated = terminated, truncated
            self._state.success = self.env.success
            return RagenObservation(
                text=text,
                reward=float(reward),
                done=bool(terminated or truncated),
                terminated=bool(terminated),
                truncated=bool(truncated),
                info=to_json(info),
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


def to_json(value: Any) -> Any:
    """``value`` with numpy scalars/arrays and tuples as JSON types; anything else unknown
    becomes its ``repr`` (an env's ``info`` may hold numpy numbers)."""
    import numpy as np

    if isinstance(value, dict):
        return {str(k): to_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_json(v) for v in value]
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return repr(value)


def create_openenv_app(
    name: str, config: dict[str, Any] | None = None, max_sessions: int = 256
) -> Any:
    """The FastAPI app (``openenv-core``'s ``create_app``) serving env ``name``."""
    core = import_openenv()
    action_cls, observation_cls, _, environment_cls = openenv_types()
    config = dict(config or {})
    make(name, **config).close()  # a bad name or config fails here, in one line
    factory = functools.partial(environment_cls, name, config)
    return core.create_app(
        factory, action_cls, observation_cls, env_name=name, max_concurrent_envs=max_sessions
    )


class _QuietClose:
    """The ASGI app, minus one traceback per session: openenv-core 0.3's WebSocket
    handler closes the socket after the client's ``close`` message, when its own client
    has already closed it, and the resulting ``WebSocketDisconnect`` is not an error."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        from starlette.websockets import WebSocketDisconnect

        try:
            await self.app(scope, receive, send)
        except WebSocketDisconnect:
            if scope.get("type") != "websocket":
                raise


class AppServer:
    """An ASGI app (an OpenEnv ``create_app`` app) under uvicorn on ``host:port``:
    ``with AppServer(app) as server: server.url``. ``port=0`` picks a free port.
    ``serve_forever()`` blocks; ``start()`` serves from a background thread (tests,
    notebooks) and ``stop()`` shuts it down."""

    def __init__(self, app: Any, host: str = "127.0.0.1", port: int = 0, quiet: bool = True):
        import uvicorn

        self.app = _QuietClose(app)
        self._socket = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._socket.bind((host, port))
        self._socket.listen(1024)  # clients queue from now on, before uvicorn's loop runs
        uv_config = uvicorn.Config(
            self.app,
            log_level="warning" if quiet else "info",
            access_log=not quiet,
            ws="auto",
            timeout_graceful_shutdown=2,  # open sessions do not hold a shutdown forever
        )
        self.server = uvicorn.Server(uv_config)
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host, port = self._socket.getsockname()[:2]
        return f"http://{host}:{port}"

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
    (``with OpenEnvServer("sokoban") as server: server.url``)."""

    def __init__(
        self,
        name: str,
        config: dict[str, Any] | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        max_sessions: int = 256,
        quiet: bool = True,
    ) -> None:
        super().__init__(create_openenv_app(name, config, max_sessions), host, port, quiet)


def serve_openenv(
    name: str,
    config: dict[str, Any] | None = None,
    host: str = "127.0.0.1",
    port: int = 8000,
    max_sessions: int = 256,
    quiet: bool = False,
) -> None:
    """Serve ``name`` over OpenEnv until interrupted (``ragen serve-env --protocol openenv``)."""
    server = OpenEnvServer(name, config, host, port, max_sessions, quiet)
    print(
        f"serving env {name!r} over OpenEnv at {server.url} (ws {server.url}/ws; train on it "
        f"with env=openenv env.config.url={server.url}); Ctrl-C stops",
        flush=True,
    )
    started = time.time()
    try:
        server.serve_forever()
    finally:
        print(f"stopped after {time.time() - started:.0f}s", flush=True)
