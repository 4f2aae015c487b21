"""A served environment as a local one: ``make("remote", url="http://host:8765")``.

The client of :mod:`ragen.envs.serving.http_server` (``ragen serve-env NAME --port P``): every
``RemoteEnv`` is one episode on the server, so an env can live in another process,
language or machine and still be trained on with ``ragen train env=remote
env.config.url=http://host:8765`` (or evaluated with ``ragen eval --env remote
--env-config url=http://host:8765``).

**Concurrency.** ``RemoteEnv.concurrent_steps`` is True: the env manager resets, and
the rollout steps, all such envs of a batch from a thread pool, so one slow episode does
not serialize the others (each request is its own HTTP connection; the server answers
in threads).

**A server that cannot be reached stops a run before it starts.** The env manager
calls :meth:`RemoteEnv.check_available` once (``GET /info``) when a run, an eval or an
SFT job builds its envs: nothing listening there is a one-line
:class:`~ragen.errors.EnvUnavailableError`, never a run on "(remote environment
unavailable)" prompts.

**Mid-run failures end episodes, and too many of them end the run.** A server that goes
down, is slower than ``timeout`` seconds, or answers with an error or with something that
is not a valid reply ends the affected episode as *truncated* (a cut the agent did not
cause; a critic bootstraps), with the reason in ``env.env_error``,
``info["env_error"]``/``info["remote_error"]`` and a logged warning (logger
``ragen.envs.serving.remote``). A failed reset gives an episode that is over before its first
turn (nothing of it is trained on). The rollout counts such episodes; more than
``rollout.max_env_error_share`` of a batch stops the run with an ``EnvUnavailableError``.
A reward that is no finite number within +-1e6 (``ragen.envs.serving.rules.check_reward``)
counts as such a failure. An exception of the served env itself ends the episode as
truncated on the server (``Env.step``), exactly as it does locally. Other calls degrade: no oracle action (None),
no facts, potential 0. A step carries the client's step counter ``t``, so a retried
request (``retries``, on connection errors only) is never applied twice.
"""

from __future__ import annotations

import http.client
import json
import logging
import math
import random
import time
import urllib.error
import urllib.request
from typing import Any

import numpy as np

from ragen.errors import EnvConfigError, EnvOptionError, EnvUnavailableError

from ..base import Env, StepResult, make_info
from ..facts import Fact
from .rules import TOKEN_ENV, auth_headers, check_reward, resolve_token
from .wire import PROTOCOL_VERSION, facts_from_json, frame_from_json

log = logging.getLogger(__name__)
#: attempts after a 503 (the server's request threads all busy), backing off
BUSY_RETRIES = 8
REQUIRED_INFO_KEYS = ("action_is_valid", "action_is_effective", "success")


class RemoteEnvError(Exception):
    """The server could not be reached or gave no valid reply (the message says which)."""


class RemoteEnv(Env):
    """One episode of an environment served over HTTP.

    Config:
        url: the server, ``http://HOST:PORT`` (``ragen serve-env`` prints it); required.
        timeout: seconds to wait for one reply before the episode is truncated.
        retries: extra attempts after a connection error (refused, reset); a timeout is
            not retried (the server is slow, not gone). A 503 (the server's request
            threads all busy) is retried up to ``BUSY_RETRIES`` times, backing off.
        retry_wait: seconds between attempts.
        token: the server's token (``ragen serve-env --token``), sent as
            ``Authorization: Bearer``; default: the ``RAGEN_ENV_TOKEN`` environment
            variable (which keeps it out of the run's config.yaml).
    """

    description = "An environment served over HTTP by `ragen serve-env` (url=http://HOST:PORT)"
    #: the rollout and env manager may step / reset these from threads (network-bound)
    concurrent_steps = True

    def __init__(
        self,
        url: str | None = None,
        timeout: float = 30.0,
        retries: int = 1,
        retry_wait: float = 0.2,
        token: str | None = None,
    ) -> None:
        super().__init__()
        if url is None:  # never a default address: an env must not depend on what listens there
            raise EnvConfigError(
                "the remote env needs the server's address. Fix: env.config.url=http://HOST:PORT "
                "(ragen train) or --env-config url=http://HOST:PORT (ragen eval), as printed by "
                "`ragen serve-env NAME --port PORT`"
            )
        url = str(url).rstrip("/")
        if not url.startswith(("http://", "https://")):
            raise EnvOptionError(
                f"url={url!r} is not an HTTP address. Fix: url=http://HOST:PORT, as printed "
                "by `ragen serve-env NAME --port PORT`"
            )
        if not timeout > 0 or retries < 0 or retry_wait < 0:
            raise EnvOptionError(
                f"timeout={timeout} must be > 0, retries={retries} and retry_wait={retry_wait} >= 0"
            )
        self.url, self.timeout = url, float(timeout)
        self.retries, self.retry_wait = int(retries), float(retry_wait)
        self.token = resolve_token(token)
        self.episode_id: str | None = None
        self._meta: dict[str, Any] | None = None  # the server's /info
        self._reset_reply: dict[str, Any] = {}
        self._obs = ""
        self._rng_seed: int | None = None
        self._t = 0

    # -- HTTP -------------------------------------------------------------------------------
    def _request(self, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        """The JSON object the server answers on ``path`` (POST ``body``, or GET)."""
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            self.url + path,
            data=data,
            method="GET" if body is None else "POST",
            headers={"Content-Type": "application/json"},
        )
        for key, value in auth_headers(self.token).items():
            request.add_header(key, value)
        attempt = busy = 0
        while True:
            try:
                with urllib.request.urlopen(request, timeout=self.timeout) as response:
                    raw = response.read()
                break
            except urllib.error.HTTPError as err:
                if err.code == 503 and busy < BUSY_RETRIES:
                    # every request thread of the server was in use: it read nothing of
                    # this request, so asking again is safe; back off (about 10 s in all)
                    time.sleep(min(2.0, max(self.retry_wait, 0.05) * 2**busy))
                    busy += 1
                    continue
                raise RemoteEnvError(f"{path}: HTTP {err.code}: {_error_text(err)}") from None
            except TimeoutError:
                raise RemoteEnvError(f"{path}: no reply within timeout={self.timeout:g}s") from None
            except http.client.HTTPException as err:  # something answered, but not HTTP
                raise RemoteEnvError(f"{path}: not an HTTP reply ({type(err).__name__})") from None
            except (urllib.error.URLError, ConnectionError, OSError) as err:
                reason = getattr(err, "reason", err)
                if isinstance(reason, (BrokenPipeError, ConnectionResetError)) and (
                    busy < BUSY_RETRIES
                ):  # a busy server's 503 can arrive as a reset: it read nothing, ask again
                    time.sleep(min(2.0, max(self.retry_wait, 0.05) * 2**busy))
                    busy += 1
                    continue
                if isinstance(reason, TimeoutError):
                    raise RemoteEnvError(
                        f"{path}: no reply within timeout={self.timeout:g}s"
                    ) from None
                if attempt == self.retries:
                    raise RemoteEnvError(f"{path}: cannot reach {self.url} ({reason})") from None
                attempt += 1
                time.sleep(self.retry_wait)
        try:
            reply = json.loads(raw)
        except ValueError:
            raise RemoteEnvError(f"{path}: the reply is not JSON: {raw[:80]!r}") from None
        if not isinstance(reply, dict):
            raise RemoteEnvError(f"{path}: the reply is not a JSON object: {raw[:80]!r}")
        return reply

    def _call(self, method: str, **args: Any) -> Any:
        if self.episode_id is None:
            raise RemoteEnvError(f"{method}: no episode (reset first)")
        reply = self._request(
            "/call", {"episode_id": self.episode_id, "method": method, "args": args}
        )
        if "result" not in reply:
            raise RemoteEnvError(f"/call {method}: the reply has no 'result'")
        return reply["result"]

    @property
    def error(self) -> str | None:
        """Why the current episode failed, if it did (``env_error``)."""
        return self.env_error

    def check_available(self) -> None:
        """Raise :class:`~ragen.errors.EnvUnavailableError` unless the server answers
        ``GET /info`` (any HTTP answer counts: a server without /info may still play)."""
        try:
            self._request("/info")
        except RemoteEnvError as err:
            if ": HTTP 401" in str(err):
                raise EnvUnavailableError(
                    f"the remote environment at {self.url} refused this client: {err}. Fix: "
                    f"the server's token in the {TOKEN_ENV} environment variable (or "
                    "env.config.token / --env-config token=...)"
                ) from None
            if ": HTTP " in str(err):  # it answered, with an error status: it is there
                return
            raise EnvUnavailableError(
                f"the remote environment at {self.url} is unavailable ({err}). Fix: start it "
                f"with `ragen serve-env NAME --port PORT` and pass its address as "
                "env.config.url (ragen train) or --env-config url=... (ragen eval)"
            ) from None

    def _fail(self, where: str, reason: str) -> None:
        self.env_error = reason
        log.warning(
            "remote env %s: episode %s (seed %s) ends truncated at %s: %s",
            self.url,
            self.episode_id,
            self.seed,
            where,
            reason,
        )

    def meta(self) -> dict[str, Any]:
        """The server's ``/info`` (fetched once); ``{}`` when the server is unreachable
        (asked again after the next successful reset)."""
        if self._meta is None:
            try:
                meta = self._request("/info")
            except RemoteEnvError as err:
                log.warning("remote env %s: /info failed: %s", self.url, err)
                self._meta = {}
                return self._meta
            if meta.get("protocol") != PROTOCOL_VERSION:
                log.warning(
                    "remote env %s speaks protocol %r, this client %r",
                    self.url,
                    meta.get("protocol"),
                    PROTOCOL_VERSION,
                )
            self._meta = meta
        return self._meta

    # -- the contract ---------------------------------------------------------------------
    def reset(self, seed: int, rng_seed: int | None = None) -> str:
        self._rng_seed = rng_seed  # forwarded: the server's env draws its own dynamics
        return super().reset(seed, rng_seed)

    def _reset(self, seed: int) -> None:
        self._t = 0
        self._reset_reply = {}  # nothing of the previous episode (its state_key) survives
        body = {"seed": int(seed), "rng_seed": self._rng_seed, "episode_id": self.episode_id}
        try:
            reply = self._request("/reset", body)
            if reply.get("env_error"):  # the served env's reset raised
                raise RemoteEnvError(f"/reset: the served env failed: {reply['env_error']}")
            obs = reply.get("observation")
            if not isinstance(obs, str) or not isinstance(reply.get("episode_id"), str):
                raise RemoteEnvError("/reset: the reply lacks a string observation/episode_id")
        except RemoteEnvError as err:
            self._fail("reset", str(err))
            self._obs = f"(remote environment unavailable: {err})"
            self.truncated = True  # the episode is over before it began
            return
        self.episode_id = reply["episode_id"]
        self._reset_reply = reply
        if self._meta == {}:  # /info failed before: the server is back, ask again
            self._meta = None
        self._obs = obs

    def _step(self, action: str) -> StepResult:
        self._t += 1
        body = {"episode_id": self.episode_id, "action": action, "t": self._t}
        try:
            if self.episode_id is None:
                raise RemoteEnvError("/step: the episode never started (its reset failed)")
            reply = self._request("/step", body)
            obs, reward, terminated, truncated, info = _check_step_reply(reply)
        except RemoteEnvError as err:
            self._fail("step", str(err))
            info = make_info(False, False, False, remote_error=str(err), env_error=str(err))
            return self._obs, 0.0, False, True, info
        self._obs = obs
        if info.get("env_error"):  # the served env raised; the server ended it as truncated
            self.env_error = str(info["env_error"])
        return obs, reward, terminated, truncated, info

    @property
    def instructions(self) -> str:
        text = self._reset_reply.get("instructions") or self.meta().get("instructions")
        if isinstance(text, str) and text.strip():
            return text
        return f"(the remote environment at {self.url} is unreachable)"

    @property
    def action_names(self) -> list[str] | None:
        names = self._reset_reply.get("action_names", self.meta().get("action_names"))
        return list(names) if isinstance(names, list) else None

    @property
    def single_turn(self) -> bool:  # type: ignore[override]
        return bool(self._reset_reply.get("single_turn", self.meta().get("single_turn", False)))

    @property
    def fact_kinds(self) -> tuple[str, ...]:  # type: ignore[override]
        return tuple(self.meta().get("fact_kinds") or ())

    @property
    def prediction_kinds(self) -> tuple[str, ...]:  # type: ignore[override]
        return tuple(self.meta().get("prediction_kinds") or ())

    @property
    def progress_potential_meaning(self) -> str:  # type: ignore[override]
        return str(self.meta().get("progress_potential_meaning") or "")

    def render(self, mode: str = "text") -> str | np.ndarray:
        if mode == "text":
            return self._obs
        if mode != "rgb":
            raise self._unsupported_mode(mode, ("text", "rgb"))
        try:
            return frame_from_json(self._call("render", mode="rgb"))
        except (RemoteEnvError, KeyError, TypeError, ValueError) as err:
            raise ValueError(f"remote render('rgb') failed: {err}") from None

    def state_key(self) -> str | None:
        key = self._reset_reply.get("state_key")
        return key if isinstance(key, str) else None

    def snapshot(self) -> object:
        try:
            remote = self._call("snapshot")
        except RemoteEnvError:
            remote = None
        return (self._obs, remote, self.terminated, self.truncated, self.success)

    def oracle_action(self) -> str | None:
        if self.done:
            return None
        try:
            action = self._call("oracle_action")
        except RemoteEnvError as err:
            log.warning("remote env %s: oracle_action failed: %s", self.url, err)
            return None
        return action if isinstance(action, str) else None

    def random_action(self, rng: random.Random) -> str:
        seed = rng.getrandbits(62)
        try:
            action = self._call("random_action", seed=seed)
            if isinstance(action, str):
                return action
        except RemoteEnvError as err:
            log.warning("remote env %s: random_action failed: %s", self.url, err)
        names = self.action_names
        # without a server there is nothing to choose from; any string will do, since
        # the episode ends as truncated at its next step anyway
        return rng.choice(names) if names else "(remote environment unavailable)"

    def state_facts(self) -> list[Fact]:
        return self._facts("state_facts")

    def predict_facts(self, actions: list[str]) -> list[Fact]:
        return self._facts("predict_facts", actions=list(actions))

    def _facts(self, method: str, **args: Any) -> list[Fact]:
        try:
            return facts_from_json(self._call(method, **args))
        except (RemoteEnvError, TypeError, ValueError) as err:
            log.warning("remote env %s: %s failed: %s", self.url, method, err)
            return []

    def progress_potential(self) -> float:
        try:
            value = float(self._call("progress_potential"))
        except (RemoteEnvError, TypeError, ValueError) as err:
            log.warning("remote env %s: progress_potential failed: %s", self.url, err)
            return 0.0
        return value if math.isfinite(value) else 0.0

    def __deepcopy__(self, memo: dict) -> RemoteEnv:
        """An independent episode: the server clones this one (the oracle's lookahead
        plays on the copy). If that fails the copy is an ended episode."""
        twin = RemoteEnv(self.url, self.timeout, self.retries, self.retry_wait, self.token)
        twin.__dict__.update(
            {k: v for k, v in self.__dict__.items() if k not in ("rng", "episode_id")}
        )
        twin.rng = random.Random()
        twin.rng.setstate(self.rng.getstate())
        twin._reset_reply = dict(self._reset_reply)
        try:
            twin.episode_id = str(self._call("clone"))
        except RemoteEnvError as err:
            twin.episode_id = None
            twin.truncated = True
            log.warning("remote env %s: clone failed: %s", self.url, err)
        return twin

    def close(self) -> None:
        if self.episode_id is None:
            return
        try:
            self._request("/close", {"episode_id": self.episode_id})
        except RemoteEnvError:
            pass  # the server is gone or dropped it already
        self.episode_id = None


def _error_text(err: urllib.error.HTTPError) -> str:
    try:
        payload = json.loads(err.read() or b"{}")
        return str(payload.get("error") or err.reason)
    except (ValueError, AttributeError, OSError):
        return str(err.reason)


def _check_step_reply(reply: dict[str, Any]) -> StepResult:
    """The reply as a :data:`StepResult`; :class:`RemoteEnvError` naming what is wrong."""
    obs, reward = reply.get("observation"), reply.get("reward")
    terminated, truncated, info = reply.get("terminated"), reply.get("truncated"), reply.get("info")
    if not isinstance(obs, str):
        raise RemoteEnvError("/step: 'observation' is not a string")
    try:  # NaN, a string, or 1e308 (whose sums overflow to inf): a broken server
        reward = check_reward(reward, "/step")
    except ValueError as err:
        raise RemoteEnvError(str(err)) from None
    if not isinstance(terminated, bool) or not isinstance(truncated, bool):
        raise RemoteEnvError("/step: 'terminated'/'truncated' are not booleans")
    if not isinstance(info, dict) or any(k not in info for k in REQUIRED_INFO_KEYS):
        raise RemoteEnvError(f"/step: 'info' lacks {', '.join(REQUIRED_INFO_KEYS)}")
    return obs, float(reward), terminated, truncated, info
