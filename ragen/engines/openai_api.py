"""Chat engine for an OpenAI-compatible ``/v1/chat/completions`` endpoint (evaluation only).

    engine = OpenAIChatEngine("http://127.0.0.1:8000/v1", model="Qwen/Qwen2.5-0.5B-Instruct")
    replies = engine.chat([[{"role": "user", "content": "hi"}]], SamplingParams(temperature=0))

Works with OpenAI, vLLM, SGLang, llama.cpp's server, Ollama... Standard library only
(``urllib``), no ``openai`` package. Details:

* ``base_url`` may end in ``/v1`` or not; ``/v1/chat/completions`` is appended as needed.
* The API key is read from the environment variable ``api_key_env`` at request time
  and sent as ``Authorization: Bearer``; it is never logged or put in an error message.
  No key -> no header (local servers rarely need one).
* ``params.stop_strings`` go out as ``stop`` (at most 4, the OpenAI limit). Servers
  strip the matched stop string from the reply, so when a reply finished with
  ``finish_reason == "stop"`` and a closing-tag stop string such as ``</answer>`` has
  its opening tag unclosed in the reply, the closing tag is appended back. Other
  stop strings cannot be restored (the API does not say which one matched).
* Retries with exponential backoff (``backoff_s * 2**attempt``, capped at 30 s, or the
  server's ``Retry-After``) on HTTP 429, 5xx and timeouts, ``max_retries`` times.
  Other HTTP errors fail at once. An unreachable endpoint (connection refused, unknown
  host) fails at once with one ``RuntimeError`` line naming the URL and the fix.
* ``concurrency`` requests run in parallel threads; replies keep the input order.
"""

from __future__ import annotations

import http.client
import json
import os
import re
import socket
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor

from ragen.errors import EngineError, UsageError

from .base import SamplingParams

MAX_STOP_STRINGS = 4
_RETRY_STATUS = {408, 409, 429, 500, 502, 503, 504}
_CLOSING_TAG = re.compile(r"^</([A-Za-z][\w-]*)>$")


def chat_completions_url(base_url: str) -> str:
    """``http://host:port[/v1]`` -> ``http://host:port/v1/chat/completions``."""
    url = base_url.rstrip("/")
    if url.endswith("/chat/completions"):
        return url
    if not url.endswith("/v1"):
        url += "/v1"
    return url + "/chat/completions"


def restore_stop_string(text: str, finish_reason: str | None, stop_strings: list[str]) -> str:
    """Re-append a closing-tag stop string (``</answer>``) that the server stripped."""
    if finish_reason != "stop":
        return text
    for stop in stop_strings:
        match = _CLOSING_TAG.match(stop)
        if not match or text.endswith(stop):
            continue
        opening = f"<{match.group(1)}>"
        if text.rfind(opening) > text.rfind(stop):  # an opened tag never closed
            return text + stop
    return text


class OpenAIChatEngine:
    """Chat engine over HTTP; see the module docstring for the retry and stop rules."""

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key_env: str = "OPENAI_API_KEY",
        timeout: float = 60,
        max_retries: int = 3,
        concurrency: int = 8,
        backoff_s: float = 1.0,
    ):
        if not base_url.startswith(("http://", "https://")):
            raise UsageError(f"base_url must start with http:// or https://, got {base_url!r}")
        if concurrency < 1 or max_retries < 0 or timeout <= 0:
            raise UsageError("need concurrency >= 1, max_retries >= 0 and timeout > 0")
        self.url = chat_completions_url(base_url)
        self.model = model
        self.api_key_env = api_key_env
        self.timeout = float(timeout)
        self.max_retries = int(max_retries)
        self.concurrency = int(concurrency)
        self.backoff_s = float(backoff_s)
        self.stats = {"requests": 0, "retries": 0, "seconds": 0.0}
        self._stats_lock = threading.Lock()

    def chat(self, conversations: list[list[dict]], params: SamplingParams) -> list[str]:
        """One reply per conversation (same order)."""
        if not conversations:
            return []
        start = time.perf_counter()
        workers = min(self.concurrency, len(conversations))
        if workers == 1:
            replies = [self._complete(c, params) for c in conversations]
        else:
            with ThreadPoolExecutor(max_workers=workers) as pool:
                replies = list(pool.map(lambda c: self._complete(c, params), conversations))
        self.stats["seconds"] += time.perf_counter() - start
        return replies

    # ------------------------------------------------------------------------------------
    def _payload(self, messages: list[dict], params: SamplingParams) -> dict:
        payload = {
            "model": self.model,
            "messages": messages,
            "temperature": params.temperature,
            "top_p": params.top_p,
            "max_tokens": params.max_new_tokens,
            "n": 1,
        }
        if params.top_k > 0:
            payload["top_k"] = params.top_k  # vLLM / SGLang extension; others ignore it
        if params.stop_strings:
            payload["stop"] = list(params.stop_strings)[:MAX_STOP_STRINGS]
        if params.seed is not None:
            payload["seed"] = params.seed
        return payload

    def _headers(self) -> dict[str, str]:
        headers = {"Content-Type": "application/json"}
        key = os.environ.get(self.api_key_env)
        if key:
            headers["Authorization"] = f"Bearer {key}"
        return headers

    def _complete(self, messages: list[dict], params: SamplingParams) -> str:
        body = json.dumps(self._payload(messages, params)).encode()
        for attempt in range(self.max_retries + 1):
            self._count("requests")
            last = attempt == self.max_retries
            request = urllib.request.Request(self.url, data=body, headers=self._headers())
            try:
                with urllib.request.urlopen(request, timeout=self.timeout) as response:
                    data = json.loads(response.read().decode("utf-8"))
                return self._reply_text(data, params)
            except urllib.error.HTTPError as err:
                detail = _short(err.read().decode("utf-8", "replace"))
                if err.code not in _RETRY_STATUS:
                    raise EngineError(
                        f"{self.url} answered HTTP {err.code}: {detail}; check the model name, "
                        f"the request and the API key in ${self.api_key_env}"
                    ) from None
                if last:
                    raise EngineError(
                        f"{self.url} kept failing (HTTP {err.code}: {detail}) after "
                        f"{self.max_retries + 1} attempts; is the server overloaded?"
                    ) from None
                delay = _retry_after(err) or self._backoff(attempt)
            except TimeoutError as err:
                if last:
                    raise EngineError(
                        f"{self.url} timed out after {self.timeout:g} s "
                        f"({self.max_retries + 1} attempts); raise the timeout or check the server"
                    ) from err
                delay = self._backoff(attempt)
            except urllib.error.URLError as err:
                if isinstance(err.reason, (TimeoutError, socket.timeout)) and not last:
                    delay = self._backoff(attempt)
                else:
                    raise EngineError(
                        f"cannot reach {self.url} ({_short(str(err.reason))}); is the server "
                        "running? check --api-base (it should point at .../v1)"
                    ) from None
            except (ConnectionResetError, http.client.HTTPException) as err:
                # the server dropped the connection mid-request: treat like a 5xx
                if last:
                    raise EngineError(
                        f"{self.url} closed the connection ({_short(str(err)) or type(err).__name__}) "
                        f"after {self.max_retries + 1} attempts; check the server log"
                    ) from None
                delay = self._backoff(attempt)
            except (json.JSONDecodeError, UnicodeDecodeError) as err:
                raise EngineError(
                    f"{self.url} did not return JSON ({err}); is it an OpenAI-compatible endpoint?"
                ) from None
            self._count("retries")
            time.sleep(delay)
        raise AssertionError("unreachable")  # the loop returns or raises

    def _count(self, key: str) -> None:
        with self._stats_lock:
            self.stats[key] += 1

    def _backoff(self, attempt: int) -> float:
        return min(30.0, self.backoff_s * 2**attempt)

    def _reply_text(self, data: dict, params: SamplingParams) -> str:
        try:
            choice = data["choices"][0]
            text = choice["message"].get("content") or ""
        except (KeyError, IndexError, TypeError, AttributeError):
            raise EngineError(
                f"{self.url} returned no choices[0].message: {_short(json.dumps(data))}"
            ) from None
        return restore_stop_string(text, choice.get("finish_reason"), list(params.stop_strings))


def _retry_after(err: urllib.error.HTTPError) -> float | None:
    value = err.headers.get("Retry-After") if err.headers else None
    try:
        return min(30.0, max(0.0, float(value))) if value is not None else None
    except ValueError:
        return None


def _short(text: str, limit: int = 200) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit] + "..."
