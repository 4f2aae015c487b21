"""Serve a registered environment over HTTP: ``ragen serve-env NAME --port P``.

Many episodes at once, each with its own env instance, seed and dynamics seed; requests
are handled in threads (``http.server.ThreadingHTTPServer``, stdlib only), one at a time
per episode. The protocol is JSON over POST (GET for ``/info`` and ``/health``), so a
server can be written in any language; :mod:`ragen.envs.serving.remote` is the client.

==========  ===========================================  ==================================
endpoint    request                                      reply
==========  ===========================================  ==================================
/health     (GET)                                        ``{"ok": true, "episodes": n}``
/info       (GET)                                        ``name, description, instructions,
                                                         action_names, single_turn,
                                                         fact_kinds, prediction_kinds,
                                                         progress_potential_meaning``
/reset      ``{"seed", "rng_seed"?, "episode_id"?}``      ``episode_id, observation,
                                                         instructions, action_names,
                                                         state_key, single_turn`` (a new
                                                         episode unless ``episode_id`` is
                                                         one the server holds)
/step       ``{"episode_id", "action", "t"?}``            ``observation, reward, terminated,
                                                         truncated, info``
/call       ``{"episode_id", "method", "args"?}``         ``{"result": ...}`` for ``oracle_action
                                                         random_action(seed) render(mode)
                                                         state_facts predict_facts(actions)
                                                         progress_potential snapshot clone``
/close      ``{"episode_id"}``                            ``{"ok": true}``
==========  ===========================================  ==================================

``t`` (the client's step counter) makes a retried step idempotent: a ``t`` equal to the
episode's last one returns the cached reply instead of stepping again. Facts travel as
``[kind, row, col]``, an rgb frame as ``{"shape": [H, W, 3], "data": base64 bytes}``
(:mod:`ragen.envs.serving.wire`).
Errors are ``{"error": "..."}`` with status 400 (bad request: not JSON, a
``Content-Length`` that is missing (411), negative, not a number or longer than the body
sent), 401 (a token is set and the request lacks it), 404 (unknown episode or path), 408
(the body did not arrive within ``read_timeout``), 413 (a body over 1 MiB), 503 (all
``max_threads`` request threads busy) or 500 (an env method other than reset/step
raised). An exception inside the env's own step or reset is no HTTP error: the env ends
that episode as truncated with ``info["env_error"]`` (``ragen.envs.base``), exactly as a
local env does, and ``/reset`` answers ``env_error`` then.

Limits, so that no client can exhaust the server: each connection waits at most
``read_timeout`` seconds for a request (then it is closed), at most ``max_threads``
requests are served at once (more are answered 503 at once), at most ``max_episodes``
episodes are held (the least recently used one is dropped to make room) and an episode
nobody touched for ``episode_timeout`` seconds is dropped (a client that died without
``/close``). ``token``: every request must then carry ``Authorization: Bearer <token>``
(``ragen serve-env --token``, or the ``RAGEN_ENV_TOKEN`` environment variable on both
sides); serve beyond localhost only with one. These rules, and their messages, are
:mod:`ragen.envs.serving.rules`', which the OpenEnv server enforces too.
"""

from __future__ import annotations

import copy
import json
import random
import socket
import threading
import time
import uuid
from collections import OrderedDict
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from ..base import Env
from ..registry import make
from .rules import (
    BODY_TOO_LARGE,
    BUSY,
    MAX_BODY_BYTES,
    UNAUTHORIZED,
    RequestError,
    ServerLimits,
    authorized,
    bind_errors,
    http_url,
    int_field,
    read_timeout_text,
    resolve_token,
    warn_if_exposed,
)
from .wire import PROTOCOL_VERSION, facts_to_json, frame_to_json, jsonable

CALL_METHODS = (
    "oracle_action",
    "random_action",
    "render",
    "state_facts",
    "predict_facts",
    "progress_potential",
    "snapshot",
    "clone",
)


class _Episode:
    def __init__(self, env: Env) -> None:
        self.env = env
        self.lock = threading.Lock()
        self.last_t: int | None = None
        self.last_reply: dict[str, Any] | None = None
        self.last_used = time.monotonic()


class EnvService:
    """The episodes of one registered env and the operations on them (no HTTP here)."""

    def __init__(
        self,
        name: str,
        config: dict[str, Any] | None = None,
        max_episodes: int = 4096,
        episode_timeout: float = 3600.0,
    ) -> None:
        self.name, self.config = name, dict(config or {})
        self.max_episodes = int(max_episodes)
        # an episode idle this long is dropped: its client died without /close
        self.episode_timeout = float(episode_timeout)
        self._template = make(name, **self.config)  # fails early on a bad name or config
        self._episodes: OrderedDict[str, _Episode] = OrderedDict()
        self._lock = threading.Lock()

    def info(self) -> dict[str, Any]:
        env = self._template
        return {
            "protocol": PROTOCOL_VERSION,
            "name": self.name,
            "description": type(env).description or "",
            "instructions": env.instructions,
            "action_names": env.action_names,
            "single_turn": bool(env.single_turn),
            "fact_kinds": list(env.fact_kinds),
            "prediction_kinds": list(env.prediction_kinds),
            "progress_potential_meaning": env.progress_potential_meaning,
        }

    def health(self) -> dict[str, Any]:
        return {"ok": True, "name": self.name, "episodes": len(self._episodes)}

    # -- episodes ------------------------------------------------------------------------
    def _add(self, env: Env) -> str:
        episode_id = uuid.uuid4().hex
        with self._lock:
            self._drop_idle()
            self._episodes[episode_id] = _Episode(env)
            while len(self._episodes) > self.max_episodes:
                _, dropped = self._episodes.popitem(last=False)
                dropped.env.close()
        return episode_id

    def _drop_idle(self) -> None:
        """Drop the episodes idle for ``episode_timeout`` s (under ``_lock``). The dict is
        in least-recently-used order, so the idle ones are at its front."""
        deadline = time.monotonic() - self.episode_timeout
        while self._episodes:
            episode_id, oldest = next(iter(self._episodes.items()))
            if oldest.last_used > deadline:
                break
            del self._episodes[episode_id]
            oldest.env.close()

    def _get(self, episode_id: Any) -> _Episode:
        with self._lock:
            self._drop_idle()
            episode = self._episodes.get(str(episode_id))
            if episode is None:
                raise RequestError(
                    404,
                    f"unknown episode {episode_id!r} (closed, idle over "
                    f"{self.episode_timeout:g}s, evicted or the server restarted)",
                )
            episode.last_used = time.monotonic()
            self._episodes.move_to_end(str(episode_id))
            return episode

    def reset(self, body: dict[str, Any]) -> dict[str, Any]:
        seed = int_field(body, "seed")
        rng_seed = int_field(body, "rng_seed", required=False)
        episode_id = body.get("episode_id")
        with self._lock:
            known = episode_id is not None and str(episode_id) in self._episodes
        if not known:
            episode_id = self._add(make(self.name, **self.config))
        episode = self._get(episode_id)
        with episode.lock:
            env = episode.env
            obs = env.reset(seed, rng_seed=rng_seed)
            episode.last_t, episode.last_reply = None, None
            if env.env_error is not None:  # the env's reset raised: say so, as local envs do
                return {"episode_id": episode_id, "observation": obs, "env_error": env.env_error}
            return {
                "episode_id": episode_id,
                "observation": obs,
                "instructions": env.instructions,
                "action_names": env.action_names,
                "state_key": env.state_key(),
                "single_turn": bool(env.single_turn),
                "done": env.done,
            }

    def step(self, body: dict[str, Any]) -> dict[str, Any]:
        episode = self._get(body.get("episode_id"))
        action = body.get("action")
        if not isinstance(action, str):
            raise RequestError(400, "action must be a string")
        t = body.get("t")
        with episode.lock:
            if t is not None and t == episode.last_t and episode.last_reply is not None:
                return episode.last_reply  # a retried request: do not step twice
            obs, reward, terminated, truncated, info = episode.env.step(action)
            reply = {
                "observation": obs,
                "reward": float(reward),
                "terminated": bool(terminated),
                "truncated": bool(truncated),
                "info": jsonable(info),
            }
            episode.last_t, episode.last_reply = t, reply
            return reply

    def call(self, body: dict[str, Any]) -> dict[str, Any]:
        method = body.get("method")
        if method not in CALL_METHODS:
            raise RequestError(400, f"method must be one of {', '.join(CALL_METHODS)}")
        args = body.get("args") or {}
        if not isinstance(args, dict):
            raise RequestError(400, "args must be an object")
        episode = self._get(body.get("episode_id"))
        with episode.lock:
            env = episode.env
            if method == "oracle_action":
                return {"result": env.oracle_action()}
            if method == "random_action":
                return {"result": env.random_action(random.Random(int_field(args, "seed")))}
            if method == "render":
                mode = args.get("mode", "text")
                out = env.render(mode)
                return {"result": out if isinstance(out, str) else frame_to_json(out)}
            if method == "state_facts":
                return {"result": facts_to_json(env.state_facts())}
            if method == "predict_facts":
                actions = args.get("actions")
                if not isinstance(actions, list) or not all(isinstance(a, str) for a in actions):
                    raise RequestError(400, "predict_facts needs args.actions, a list of strings")
                return {"result": facts_to_json(env.predict_facts(actions))}
            if method == "progress_potential":
                return {"result": float(env.progress_potential())}
            if method == "snapshot":
                return {"result": repr(env.snapshot())}
            # clone: an independent copy of the episode (the oracle's lookahead)
            twin = copy.deepcopy(env)
        return {"result": self._add(twin)}

    def close(self, body: dict[str, Any]) -> dict[str, Any]:
        with self._lock:
            episode = self._episodes.pop(str(body.get("episode_id")), None)
        if episode is not None:
            episode.env.close()
        return {"ok": True}


def _handler(
    service: EnvService, quiet: bool, token: str | None, read_timeout: float
) -> type[BaseHTTPRequestHandler]:
    routes_post = {
        "/reset": service.reset,
        "/step": service.step,
        "/call": service.call,
        "/close": service.close,
    }
    routes_get = {"/info": service.info, "/health": service.health}

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive: one connection per client thread
        # seconds a connection may take to send a request (headers and body); a client
        # that stalls holds no thread longer than this
        timeout = read_timeout

        def do_GET(self) -> None:  # noqa: N802 - http.server's naming
            if not self._authorized():
                return
            route = routes_get.get(self.path.split("?")[0])
            if route is None:
                self._reply(404, {"error": f"unknown path {self.path}"})
                return
            self._reply(200, route())

        def do_POST(self) -> None:  # noqa: N802
            if not self._authorized():
                return
            route = routes_post.get(self.path.split("?")[0])
            try:
                raw = self._read_body()
                if route is None:
                    raise RequestError(404, f"unknown path {self.path}")
                try:
                    body = json.loads(raw or b"{}")
                except ValueError as err:
                    raise RequestError(400, f"body is not JSON: {err}") from None
                if not isinstance(body, dict):
                    raise RequestError(400, "body must be a JSON object")
                self._reply(200, route(body))
            except RequestError as err:
                self._reply(err.status, {"error": str(err)})
            except Exception as err:  # noqa: BLE001 - the env raised: report, keep serving
                self._reply(500, {"error": f"{type(err).__name__}: {err}"})

        def _read_body(self) -> bytes:
            """The request body, exactly ``Content-Length`` bytes. Where the body's end is
            unknown (no, a negative or a non-numeric length; a body cut short; one over the
            limit, left unread) the connection is closed after the answer, since the next
            request on it could not be found."""
            text = self.headers.get("Content-Length")
            if text is None:
                self.close_connection = True
                raise RequestError(411, "a POST needs a Content-Length header")
            try:
                length = int(text)
            except ValueError:
                length = -1
            if length < 0:
                self.close_connection = True
                raise RequestError(400, f"Content-Length {text!r} is not a byte count")
            if length > MAX_BODY_BYTES:
                self.close_connection = True
                raise RequestError(413, BODY_TOO_LARGE)
            try:
                raw = self.rfile.read(length)
            except TimeoutError:
                self.close_connection = True
                raise RequestError(408, read_timeout_text(read_timeout)) from None
            if len(raw) < length:
                self.close_connection = True
                raise RequestError(
                    400, f"the body has {len(raw)} bytes, Content-Length said {length}"
                )
            return raw

        def _authorized(self) -> bool:
            if authorized(self.headers.get("Authorization"), token):
                return True
            self.close_connection = True  # an unread body may follow
            self._reply(401, {"error": UNAUTHORIZED})
            return False

        def _reply(self, status: int, payload: dict[str, Any]) -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            if self.close_connection:
                self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
            if not quiet:
                super().log_message(format, *args)

    return Handler


_BUSY = json.dumps({"error": BUSY}).encode()


class _Server(ThreadingHTTPServer):
    """A threading HTTP server with at most ``max_threads`` request threads: a
    connection beyond them is answered 503 at once (the client's retry or truncation
    takes over), so stalled clients cannot make the server start thread after thread."""

    daemon_threads = True
    # the default backlog of 5 makes a burst of concurrent episodes wait for TCP retries
    request_queue_size = 1024

    def __init__(self, address: tuple[str, int], handler: type, max_threads: int) -> None:
        self._slots = threading.BoundedSemaphore(max_threads)
        # IPv6 hosts too (--host ::1); an unknown host is a gaierror the caller reports
        self.address_family = socket.getaddrinfo(*address, type=socket.SOCK_STREAM)[0][0]
        super().__init__(address, handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self._slots.acquire(blocking=False):
            self._refuse(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._slots.release()  # the thread never started
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()

    def _refuse(self, request: socket.socket) -> None:
        try:
            request.settimeout(1.0)
            request.sendall(
                b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
                + f"Content-Length: {len(_BUSY)}\r\nConnection: close\r\n\r\n".encode()
                + _BUSY
            )
            # closing with the client's request still unread would reset the connection
            # (the client would see a broken pipe, not the 503 it can wait out): drop
            # what has arrived, without waiting (this is the accept loop's thread)
            request.setblocking(False)
            while request.recv(65536):
                pass
        except OSError:
            pass  # nothing more has arrived, or the client is gone already
        finally:
            self.shutdown_request(request)


class EnvServer:
    """A running HTTP server for one env (``with EnvServer("sokoban") as server: server.url``).

    ``port=0`` picks a free port. ``serve_forever()`` blocks; ``start()`` serves from a
    background thread (tests, notebooks) and ``stop()`` shuts it down.
    """

    def __init__(
        self,
        name: str,
        config: dict[str, Any] | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        max_episodes: int = 4096,
        quiet: bool = True,
        token: str | None = None,
        read_timeout: float = 30.0,
        max_threads: int = 128,
        episode_timeout: float = 3600.0,
    ) -> None:
        limits = ServerLimits(read_timeout, max_threads, max_episodes, episode_timeout)
        limits.check_descriptors(per_episode=False)  # episodes hold no connection here
        self.service = EnvService(name, config, max_episodes, episode_timeout)
        token = token or None
        handler = _handler(self.service, quiet, token, float(read_timeout))
        with bind_errors(host, port):
            self.httpd = _Server((host, port), handler, int(max_threads))
        self.token = token
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return http_url(*self.httpd.server_address[:2])

    def serve_forever(self) -> None:
        self.httpd.serve_forever(poll_interval=0.05)

    def start(self) -> EnvServer:
        self._thread = threading.Thread(target=self.serve_forever, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> EnvServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def serve(
    name: str,
    config: dict[str, Any] | None = None,
    host: str = "127.0.0.1",
    port: int = 8765,
    max_episodes: int = 4096,
    quiet: bool = False,
    token: str | None = None,
    read_timeout: float = 30.0,
    max_threads: int = 128,
    episode_timeout: float = 3600.0,
) -> None:
    """Serve ``name`` until interrupted (``ragen serve-env``). ``token`` defaults to the
    ``RAGEN_ENV_TOKEN`` environment variable. A bad limit, a port in use or a host that
    is not this machine's is a one-line :class:`~ragen.errors.UsageError`."""
    token = resolve_token(token)
    server = EnvServer(
        name, config, host, port, max_episodes, quiet, token, read_timeout, max_threads,
        episode_timeout,
    )  # fmt: skip
    print(
        f"serving env {name!r} at {server.url} (use env=remote env.config.url={server.url}); "
        "Ctrl-C stops",
        flush=True,
    )
    warn_if_exposed(host, token, server.url)
    started = time.time()
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.httpd.server_close()
        print(f"stopped after {time.time() - started:.0f}s", flush=True)
