"""Any OpenEnv environment server as a ragen environment: ``make("openenv", url=...)``.

    ragen train env=openenv env.config.url=http://127.0.0.1:8000 ...
    ragen eval --model oracle --env openenv --env-config url=http://127.0.0.1:8000

`OpenEnv <https://github.com/meta-pytorch/OpenEnv>`_ servers (``openenv-core``; TRL and
Hugging Face's environment hub use them) speak ``reset`` / ``step`` / ``state`` over a
WebSocket session per client. Each ``OpenEnvEnv`` is one such session, opened with
``openenv-core``'s own client (``GenericEnvClient``), and follows the ragen contract:

* **actions**: the action text goes into the action's one string field (found in the
  server's ``GET /schema``, or named by ``action_field``); ``action_fn="pkg.mod:fn"``
  maps the text to a whole action dict instead, for structured actions. An action the
  server's schema rejects (a validation error, nothing executed) is an invalid action.
* **observations**: a server that serves a ragen env (``ragen serve-env --protocol
  openenv``) sends its text, end flags, info, vocabulary and instructions, and they are
  used as they are. For any other server the observation is its one string field, or
  else its fields as ``key: value`` lines; ``observation_fn="pkg.mod:fn"`` maps the
  observation dict to text instead.
* **rewards and ends**: OpenEnv's ``reward`` (None is 0) and ``done`` (terminated: the
  protocol has no truncation; a ragen server's ``truncated`` passes through);
  ``max_steps`` adds a client-side step limit (a truncation). ``success`` is a ragen
  server's own; otherwise a final reward of at least ``success_reward``.
* **reference policies**: a ragen server's oracle (read from its ``state``) and
  vocabulary; for other servers ``action_names`` may name a vocabulary for the random
  policy.
* **a server that is not there stops a run before it starts**: the env manager calls
  :meth:`OpenEnvEnv.check_available` once (``GET /schema``, OpenEnv's own endpoint):
  nothing listening, something that is no OpenEnv server (garbage, another protocol,
  ``ragen serve-env`` without ``--protocol openenv``) or a refused token is a one-line
  :class:`~ragen.errors.EnvUnavailableError` naming the fix, never a run on
  "(OpenEnv environment unavailable)" prompts.
* **failures end episodes, and too many end the run**: an unreachable server, a timeout,
  a server error or a reward that is not a finite number within +-1e6 (``nan``, ``1e308``:
  ``ragen.envs.serving.rules.check_reward``) truncates the episode with the reason in
  ``env.env_error``, ``info["env_error"]``/``info["remote_error"]`` and a logged warning,
  as the ``remote`` env does; a failed reset gives an episode that is truncated from the
  start. The rollout counts such episodes (``rollout/env_error_rate``); more than
  ``rollout.max_env_error_share`` of a batch stops the run with the reason. A server
  full of sessions says so, with the fix: OpenEnv servers hold one session per client
  (default 1), and a run holds one per env (``rollout.env_groups x group_size`` plus
  validation).
* **a token**: ``token`` (default: the ``RAGEN_ENV_TOKEN`` environment variable) is sent
  as ``Authorization: Bearer`` on every request and the WebSocket handshake
  (``ragen serve-env --protocol openenv --token``).
* **sessions end with the process**: open sessions are closed at exit (``atexit``),
  while threads can still run; a session left to the garbage collector at interpreter
  shutdown is dropped without a goodbye (closing it there started a thread and hung).

``copy.deepcopy(env)`` (the oracle's multi-action lookahead) opens a new session and
replays the episode's actions from its seed (exact for a seeded, deterministic server
and for ragen servers, whose dynamics follow ``rng_seed``).
"""

from __future__ import annotations

import atexit
import http.client
import importlib
import json
import logging
import random
import sys
import urllib.error
import urllib.request
import weakref
from collections.abc import Callable
from typing import Any

import numpy as np

from ragen.errors import EnvConfigError, EnvOptionError, EnvUnavailableError

from ..base import Env, StepResult, make_info
from ..serving.openenv_server import PROTOCOL, import_openenv
from ..serving.rules import TOKEN_ENV, auth_headers, check_reward, resolve_token

log = logging.getLogger(__name__)
_IGNORED_FIELDS = ("metadata",)


class OpenEnvError(Exception):
    """The server could not be reached or answered with an error (the message says which)."""


class _NotAnAction(Exception):
    """``action_fn`` rejected the text: the step is an invalid action, nothing is sent."""


def load_function(spec: str | Callable[..., Any] | None, key: str) -> Callable[..., Any] | None:
    """``"pkg.module:function"`` (or a callable) as a callable; ``key`` names the config
    option in the error."""
    if spec is None or callable(spec):
        return spec
    module, _, name = str(spec).partition(":")
    try:
        fn = getattr(importlib.import_module(module), name) if name else None
    except (ImportError, AttributeError) as err:
        raise EnvConfigError(
            f"{key}={spec!r} cannot be imported ({err}). Fix: {key}=package.module:function"
        ) from None
    if not callable(fn):
        raise EnvConfigError(
            f"{key}={spec!r} is not a function. Fix: {key}=package.module:function"
        )
    return fn


def observation_text(observation: dict[str, Any]) -> str:
    """The default text of a (non-ragen) OpenEnv observation: its one string field, or
    its fields as ``key: value`` lines (nested values as JSON)."""
    fields = {k: v for k, v in observation.items() if k not in _IGNORED_FIELDS and v is not None}
    strings = [v for v in fields.values() if isinstance(v, str)]
    if len(strings) == 1 and len(fields) == 1:
        return strings[0]
    lines = []
    for key in sorted(fields):
        value = fields[key]
        shown = value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=str)
        lines.append(f"{key}: {shown}")
    return "\n".join(lines)


def _get_json(url: str, timeout: float, token: str | None = None) -> dict[str, Any]:
    request = urllib.request.Request(url, headers=auth_headers(token))
    with urllib.request.urlopen(request, timeout=timeout) as response:
        reply = json.loads(response.read())
    if not isinstance(reply, dict):
        raise ValueError(f"{url} did not answer with a JSON object")
    return reply


#: the sessions open in this process, closed at exit while threads still run
_OPEN: weakref.WeakSet[OpenEnvEnv] = weakref.WeakSet()


@atexit.register
def _close_open_sessions() -> None:
    for env in list(_OPEN):
        env.close()


def _client_class(token: str | None) -> type:
    """openenv-core's ``GenericEnvClient``; with a token, one that sends it on the
    WebSocket handshake (openenv-core's own ``connect`` takes no headers)."""
    from openenv.core import GenericEnvClient

    if token is None:
        return GenericEnvClient
    from websockets.asyncio.client import connect as ws_connect

    class TokenClient(GenericEnvClient):
        async def connect(self) -> Any:
            if self._ws is None:
                try:
                    self._ws = await ws_connect(
                        self._ws_url,
                        open_timeout=self._connect_timeout,
                        max_size=self._max_message_size,
                        additional_headers=auth_headers(token),
                        proxy=None,  # a local or named server, never through a proxy
                    )
                except Exception as err:  # noqa: BLE001 - as openenv-core's connect says it
                    raise ConnectionError(f"Failed to connect to {self._ws_url}: {err}") from err
            return self

    return TokenClient


class OpenEnvEnv(Env):
    """One session on an OpenEnv server.

    Config:
        url: the server, ``http://HOST:PORT`` (required).
        action_field: the action's string field (default: the one string field of the
            server's action schema).
        action_fn: ``"pkg.module:function"`` mapping the action text to the action dict
            (for structured actions; replaces ``action_field``).
        observation_fn: ``"pkg.module:function"`` mapping the observation dict to text.
        instructions: the rules shown to the agent (default: the server's, from a ragen
            server's reset or the ``/metadata`` description).
        action_names: the action vocabulary, if the server has one and does not say it.
        success_reward: a final reward counted as a success (non-ragen servers).
        max_steps: steps before the client truncates the episode (None: the server ends it).
        timeout: seconds to connect and to wait for each reply.
        reset_kwargs: extra keyword arguments of the server's ``reset``.
        token: the server's token (``ragen serve-env --protocol openenv --token``), sent
            as ``Authorization: Bearer``; default: the ``RAGEN_ENV_TOKEN`` environment
            variable (which keeps it out of the run's config.yaml).
    """

    description = "Any OpenEnv environment server by URL (url=http://HOST:PORT; ragen[openenv])"
    #: the rollout and env manager may step / reset these from threads (network-bound)
    concurrent_steps = True

    def __init__(
        self,
        url: str | None = None,
        action_field: str | None = None,
        action_fn: str | Callable[[str], dict[str, Any]] | None = None,
        observation_fn: str | Callable[[dict[str, Any]], str] | None = None,
        instructions: str | None = None,
        action_names: list[str] | None = None,
        success_reward: float = 1.0,
        max_steps: int | None = None,
        timeout: float = 30.0,
        reset_kwargs: dict[str, Any] | None = None,
        token: str | None = None,
    ) -> None:
        super().__init__()
        if url is None:
            raise EnvConfigError(
                "the openenv env needs the server's address. Fix: env.config.url=http://HOST:PORT "
                "(ragen train) or --env-config url=http://HOST:PORT (ragen eval)"
            )
        url = str(url).rstrip("/")
        if not url.startswith(("http://", "https://", "ws://", "wss://")):
            raise EnvOptionError(f"url={url!r} is not an address. Fix: url=http://HOST:PORT")
        if not timeout > 0 or (max_steps is not None and max_steps < 1):
            raise EnvOptionError(
                f"timeout={timeout} must be > 0 and max_steps={max_steps} >= 1 (or null)"
            )
        import_openenv()  # a missing package fails here, naming the extra
        self.url = url.replace("ws://", "http://", 1).replace("wss://", "https://", 1)
        self.action_field = action_field
        self._action_fn = load_function(action_fn, "action_fn")
        self._observation_fn = load_function(observation_fn, "observation_fn")
        self._config = {
            "url": url,
            "action_field": action_field,
            "action_fn": action_fn,
            "observation_fn": observation_fn,
            "instructions": instructions,
            "action_names": action_names,
            "success_reward": success_reward,
            "max_steps": max_steps,
            "timeout": timeout,
            "reset_kwargs": reset_kwargs,
            "token": token,
        }
        self._instructions = instructions
        self._action_names = list(action_names) if action_names else None
        self.success_reward, self.max_steps = float(success_reward), max_steps
        self.timeout = float(timeout)
        self.reset_kwargs = dict(reset_kwargs or {})
        self.token = resolve_token(token)
        self._client: Any = None
        self._metadata: dict[str, Any] | None = None
        self._ragen = False  # the server serves a ragen env (its observations say so)
        self._reset_obs: dict[str, Any] = {}
        self._server_names: list[str] | None = None
        self._obs = ""
        self._rng_seed: int | None = None
        self._history: list[str] = []
        self._steps = 0

    @property
    def error(self) -> str | None:
        """Why the current episode failed, if it did (``env_error``)."""
        return self.env_error

    # -- the session ------------------------------------------------------------------------
    def _session(self) -> Any:
        if self._client is None:
            client = _client_class(self.token)(
                base_url=self.url, connect_timeout_s=self.timeout, message_timeout_s=self.timeout
            ).sync()
            self._client = client  # set first: a failed connect still closes its thread
            _OPEN.add(self)
            client.connect()
        return self._client

    def check_available(self) -> None:
        """Raise :class:`~ragen.errors.EnvUnavailableError` unless an OpenEnv server
        answers ``GET /schema`` (with the token, if any) with its action schema."""
        where = f"the OpenEnv environment at {self.url}"
        start = (
            "Fix: start it (`ragen serve-env NAME --protocol openenv --port PORT` for a "
            "ragen env) and pass its address as env.config.url (ragen train) or "
            "--env-config url=... (ragen eval)"
        )
        try:
            schema = _get_json(self.url + "/schema", self.timeout, self.token)
        except urllib.error.HTTPError as err:
            if err.code == 401:
                raise EnvUnavailableError(
                    f"{where} refused this client (HTTP 401: missing or wrong token). Fix: "
                    f"the server's token in the {TOKEN_ENV} environment variable (or "
                    "env.config.token / --env-config token=...)"
                ) from None
            raise EnvUnavailableError(
                f"{where} answered GET /schema with HTTP {err.code}: it is no OpenEnv "
                "server (a `ragen serve-env` without --protocol openenv is env=remote). " + start
            ) from None
        except (http.client.HTTPException, ValueError, UnicodeDecodeError) as err:
            raise EnvUnavailableError(
                f"{where} answered GET /schema with something that is not OpenEnv's JSON "
                f"({type(err).__name__}: {str(err)[:60]!r}): it is no OpenEnv server. {start}"
            ) from None
        except OSError as err:  # refused, unreachable, timed out (URLError is one)
            reason = getattr(err, "reason", err)
            raise EnvUnavailableError(f"{where} is unavailable ({reason}). {start}") from None
        if not isinstance(schema.get("action"), dict):
            raise EnvUnavailableError(
                f"{where} answered GET /schema without an action schema: it is no OpenEnv "
                f"server. {start}"
            )

    def _call(self, what: str, fn: Callable[[Any], Any]) -> Any:
        """``fn(client)``, with every failure as an :class:`OpenEnvError` naming ``what``;
        a broken session is dropped (the next reset reconnects)."""
        try:
            return fn(self._session())
        except OpenEnvError:
            raise
        except Exception as err:  # noqa: BLE001 - network, protocol and server errors alike
            message = str(err) or type(err).__name__
            closed = type(err).__name__.startswith("ConnectionClosed")
            if "CAPACITY_REACHED" in message or (closed and what == "reset"):
                # a full server answers a new session with an error and closes it at once
                message += (
                    " (the server closed the session; a server holding max_concurrent_envs "
                    "sessions does that to the next one) Fix: start the server with more "
                    "sessions (max_concurrent_envs in openenv-core's create_app, "
                    "--max-episodes for ragen serve-env); a run holds one per env"
                )
            if "VALIDATION_ERROR" not in message:
                self._drop_session()
            raise OpenEnvError(f"{what}: {message}") from None

    def _drop_session(self) -> None:
        """Close the session. openenv-core's sync client runs its socket on a thread of
        its own; closing a client whose thread is gone would start a new one, which hangs
        at interpreter shutdown (the process would never exit), so
        such a client, or any at shutdown, is dropped without a goodbye (the server's
        idle timeout and the closed socket end the session there)."""
        client, self._client = self._client, None
        _OPEN.discard(self)
        if client is None:
            return
        thread = getattr(client, "_loop_thread", None)
        if sys.is_finalizing() or thread is None or not thread.is_alive():
            return
        try:
            client.close()
        except Exception:  # noqa: BLE001 - the session is gone already
            pass

    def _fail(self, where: str, reason: str) -> None:
        self.env_error = reason
        log.warning(
            "openenv env %s: episode (seed %s) ends truncated at %s: %s",
            self.url,
            self.seed,
            where,
            reason,
        )

    def metadata(self) -> dict[str, Any]:
        """The server's ``GET /metadata`` (``{}`` when it has none)."""
        if self._metadata is None:
            try:
                self._metadata = _get_json(self.url + "/metadata", self.timeout, self.token)
            except (OSError, ValueError, http.client.HTTPException) as err:
                log.warning("openenv env %s: /metadata failed: %s", self.url, err)
                self._metadata = {}
        return self._metadata

    def _field(self) -> str:
        """The action's string field: ``action_field``, or the one in ``GET /schema``."""
        if self.action_field is None:
            try:
                schema = _get_json(self.url + "/schema", self.timeout, self.token)["action"]
            except (OSError, ValueError, KeyError, http.client.HTTPException) as err:
                raise OpenEnvError(f"/schema: cannot read the action schema ({err})") from None
            props = {
                k: v
                for k, v in (schema.get("properties") or {}).items()
                if k not in _IGNORED_FIELDS
            }
            strings = [k for k, v in props.items() if v.get("type") == "string"]
            if len(strings) != 1:
                raise EnvConfigError(
                    f"the OpenEnv server at {self.url} takes actions with fields {sorted(props)}; "
                    "name the text field with env.config.action_field=NAME, or map the text to "
                    "an action dict with env.config.action_fn=package.module:function"
                )
            self.action_field = strings[0]
        return self.action_field

    # -- the contract -------------------------------------------------------------------------
    def reset(self, seed: int, rng_seed: int | None = None) -> str:
        self._rng_seed = rng_seed
        return super().reset(seed, rng_seed)

    def _reset(self, seed: int) -> None:
        self._history, self._steps = [], 0
        kwargs = {"seed": int(seed), **self.reset_kwargs}
        if self._rng_seed is not None:
            kwargs["rng_seed"] = int(self._rng_seed)
        try:
            result = self._call("reset", lambda client: client.reset(**kwargs))
        except OpenEnvError as err:
            self._fail("reset", str(err))
            self._obs = f"(OpenEnv environment unavailable: {err})"
            self.truncated = True  # the episode is over before it began
            return
        obs = dict(result.observation or {})
        self._ragen = obs.get("protocol") == PROTOCOL
        self._reset_obs = obs
        self._server_names = obs.get("action_names") if self._ragen else None
        self._obs = self._text(obs)
        if result.done:  # a server may end an episode at once
            self.terminated = not (self._ragen and obs.get("truncated"))
            self.truncated = not self.terminated

    def _step(self, action: str) -> StepResult:
        if self._client is None:  # the session broke (a failed state call): never step a
            reason = self.error or "the session to the server was lost"  # fresh one blind
            self._fail("step", reason)
            info = make_info(False, False, False, remote_error=reason, env_error=reason)
            return self._obs, 0.0, False, True, info
        try:
            payload = self._payload(action)
            result = self._call("step", lambda client: client.step(payload))
        except _NotAnAction as err:
            return self._obs, 0.0, False, False, make_info(False, False, False, reason=str(err))
        except OpenEnvError as err:
            if "VALIDATION_ERROR" in str(err):  # nothing was executed: an invalid action
                info = make_info(False, False, False, reason=str(err))
                return self._obs, 0.0, False, False, info
            self._fail("step", str(err))
            info = make_info(False, False, False, remote_error=str(err), env_error=str(err))
            return self._obs, 0.0, False, True, info
        obs = dict(result.observation or {})
        try:  # None is OpenEnv's "no reward"; NaN or 1e308 is a broken server
            if result.reward is None and self._ragen:  # a ragen env always pays a number:
                raise ValueError(  # openenv-core sends a NaN or infinite one as null
                    "step: the ragen server sent no reward (null): its env paid a NaN or "
                    "infinite one"
                )
            reward = 0.0 if result.reward is None else check_reward(result.reward, "step")
        except ValueError as err:
            self._fail("step", str(err))
            info = make_info(False, False, False, remote_error=str(err), env_error=str(err))
            return self._text(obs), 0.0, False, True, info
        self._obs = self._text(obs)
        if self._ragen:
            info = dict(obs.get("info") or {})
            terminated, truncated = bool(obs.get("terminated")), bool(obs.get("truncated"))
            self._server_names = obs.get("action_names")
            valid = bool(info.get("action_is_valid", True))
        else:
            terminated, truncated, valid = bool(result.done), False, True
            info = make_info(True, True, terminated and reward >= self.success_reward)
        if valid:
            self._history.append(action)
            self._steps += 1
        if self.max_steps is not None and self._steps >= self.max_steps and not terminated:
            truncated = True
        for key in ("action_is_valid", "action_is_effective", "success"):
            info.setdefault(key, key != "success")
        return self._obs, reward, terminated, truncated, info

    def _payload(self, action: str) -> dict[str, Any]:
        if self._action_fn is not None:
            try:
                payload = self._action_fn(action)
            except (ValueError, TypeError, KeyError) as err:
                # the text names no action the server takes: an invalid action, not an
                # env failure (``action_fn`` may parse numbers, look names up, ...)
                raise _NotAnAction(f"action_fn could not map {action[:40]!r}: {err}") from None
            if not isinstance(payload, dict):
                raise EnvConfigError(f"action_fn must return a dict, got {type(payload).__name__}")
            return payload
        return {self._field(): action}

    def _text(self, obs: dict[str, Any]) -> str:
        if self._observation_fn is not None:
            return str(self._observation_fn(obs))
        if self._ragen:
            return str(obs.get("text", ""))
        return observation_text(obs)

    @property
    def instructions(self) -> str:
        if self._instructions:
            return self._instructions
        if self._ragen and self._reset_obs.get("instructions"):
            return str(self._reset_obs["instructions"])
        meta = self.metadata()
        text = meta.get("readme_content") or meta.get("description") or ""
        name = meta.get("name") or "an OpenEnv environment"
        return (
            f"You interact with {name} served over OpenEnv. {text}".strip()
            + "\nAnswer with one action per step."
        )

    @property
    def action_names(self) -> list[str] | None:
        return self._action_names or self._server_names

    def render(self, mode: str = "text") -> str | np.ndarray:
        if mode != "text":
            raise self._unsupported_mode(mode)
        return self._obs

    def _state(self) -> dict[str, Any]:
        if not self._ragen or self._client is None:
            return {}
        try:
            state = self._call("state", lambda client: client.state())
        except OpenEnvError as err:
            log.warning("openenv env %s: state failed: %s", self.url, err)
            return {}
        return state if isinstance(state, dict) else {}

    def state_key(self) -> str | None:
        """A ragen server's own key; None for other servers, whose first observation need
        not show the state (a hidden number): those split train and validation by seed
        range, and no seeds are probed over the network."""
        key = self._reset_obs.get("state_key") if self._ragen else None
        return key if isinstance(key, str) else None

    def snapshot(self) -> object:
        return (self._obs, self._state().get("snapshot"), self.terminated, self.truncated)

    def oracle_action(self) -> str | None:
        if self.done:
            return None
        action = self._state().get("oracle_action")
        return action if isinstance(action, str) else None

    def random_action(self, rng: random.Random) -> str:
        names = self.action_names
        if not names:
            raise NotImplementedError(
                f"the OpenEnv server at {self.url} names no action vocabulary and has no "
                "oracle (only a ragen server has), so no action can be drawn for the random "
                "policy, oracle epsilon or an oracle without an answer. Fix: name its "
                "actions: --env-config 'action_names=[a,b,c]' (ragen eval) or "
                "env.config.action_names=[a,b,c] (ragen train)"
            )
        return rng.choice(names)

    def close(self) -> None:
        self._drop_session()

    def __deepcopy__(self, memo: dict) -> OpenEnvEnv:
        """An independent episode: a new session, reset to the same seed, with this
        episode's actions replayed."""
        twin = OpenEnvEnv(**self._config)
        twin.name = self.name
        if self.seed is not None:
            twin.reset(self.seed, rng_seed=self._rng_seed)
            for action in self._history:
                if twin.done:
                    break
                twin.step(action)
        twin.rng = random.Random()
        twin.rng.setstate(self.rng.getstate())
        return twin

    def __del__(self) -> None:
        try:
            self._drop_session()
        except Exception:  # noqa: BLE001 - a half-built instance, interpreter shutdown
            pass
