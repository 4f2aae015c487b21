"""OpenAIChatEngine against a loopback HTTP server started by the test."""

from __future__ import annotations

import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from ragen.engines.base import SamplingParams
from ragen.engines.openai_api import (
    OpenAIChatEngine,
    chat_completions_url,
    restore_stop_string,
)


class FakeServer:
    """An OpenAI-compatible stub. ``script`` is a list of actions consumed per request:
    ``"ok"`` (reply), ``"500"`` / ``"429"`` / ``"400"`` (that status), ``"slow"``
    (sleep past the client timeout, then reply). When empty, requests get ``"ok"``.
    """

    def __init__(self):
        self.script: list[str] = []
        self.requests: list[dict] = []
        self.lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # keep test output clean
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with server.lock:
                    server.requests.append(
                        {"path": self.path, "body": body, "auth": self.headers.get("Authorization")}
                    )
                    action = server.script.pop(0) if server.script else "ok"
                if action == "slow":
                    time.sleep(0.6)
                if action in ("500", "429", "400"):
                    self._send(int(action), {"error": {"message": f"status {action}"}})
                    return
                last = body["messages"][-1]["content"]
                # like real servers: the stop string is NOT included in the reply
                reply = {"content": f"<think>echo {last}</think><answer>Left", "finish": "stop"}
                self._send(
                    200,
                    {
                        "choices": [
                            {
                                "index": 0,
                                "message": {"role": "assistant", "content": reply["content"]},
                                "finish_reason": reply["finish"],
                            }
                        ]
                    },
                )

            def _send(self, status, payload):
                data = json.dumps(payload).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (timeout test)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(
            target=self.httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )
        self.thread.start()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def server():
    s = FakeServer()
    yield s
    s.close()


def _conv(text: str) -> list[dict]:
    return [{"role": "system", "content": "play"}, {"role": "user", "content": text}]


def test_success_order_payload_and_stop_restored(server, monkeypatch):
    monkeypatch.setenv("RAGEN_TEST_KEY", "sk-secret")
    engine = OpenAIChatEngine(server.base_url, "m", api_key_env="RAGEN_TEST_KEY", concurrency=4)
    params = SamplingParams(temperature=0.5, top_p=0.9, max_new_tokens=32, seed=3)
    replies = engine.chat([_conv(f"q{i}") for i in range(6)], params)
    # order kept, "</answer>" re-appended after the server stripped it
    assert replies == [f"<think>echo q{i}</think><answer>Left</answer>" for i in range(6)]
    req = server.requests[0]
    assert req["path"] == "/v1/chat/completions"
    assert req["auth"] == "Bearer sk-secret"
    body = req["body"]
    assert body["stop"] == ["</answer>"] and body["model"] == "m"
    assert body["temperature"] == 0.5 and body["top_p"] == 0.9
    assert body["max_tokens"] == 32 and body["seed"] == 3
    assert "top_k" not in body


def test_no_key_sends_no_auth_header(server, monkeypatch):
    monkeypatch.delenv("RAGEN_TEST_KEY", raising=False)
    engine = OpenAIChatEngine(server.base_url, "m", api_key_env="RAGEN_TEST_KEY")
    engine.chat([_conv("x")], SamplingParams())
    assert server.requests[0]["auth"] is None


def test_retries_500_then_succeeds(server):
    server.script = ["500", "429", "ok"]
    engine = OpenAIChatEngine(server.base_url, "m", max_retries=3, backoff_s=0.01, concurrency=1)
    assert engine.chat([_conv("a")], SamplingParams())[0].startswith("<think>echo a")
    assert len(server.requests) == 3
    assert engine.stats["retries"] == 2


def test_gives_up_after_max_retries(server):
    server.script = ["500"] * 5
    engine = OpenAIChatEngine(server.base_url, "m", max_retries=1, backoff_s=0.01)
    with pytest.raises(RuntimeError, match="HTTP 500.*2 attempts"):
        engine.chat([_conv("a")], SamplingParams())
    assert len(server.requests) == 2


def test_client_error_is_not_retried(server, monkeypatch):
    monkeypatch.setenv("RAGEN_TEST_KEY", "sk-secret")
    server.script = ["400"]
    engine = OpenAIChatEngine(server.base_url, "m", api_key_env="RAGEN_TEST_KEY", backoff_s=0.01)
    with pytest.raises(RuntimeError, match="HTTP 400") as info:
        engine.chat([_conv("a")], SamplingParams())
    assert "sk-secret" not in str(info.value)
    assert len(server.requests) == 1


def test_timeout_then_success_and_timeout_error(server):
    server.script = ["slow", "ok"]
    engine = OpenAIChatEngine(server.base_url, "m", timeout=0.2, max_retries=2, backoff_s=0.01)
    assert engine.chat([_conv("t")], SamplingParams())[0].startswith("<think>echo t")
    server.script = ["slow", "slow"]
    engine = OpenAIChatEngine(server.base_url, "m", timeout=0.2, max_retries=1, backoff_s=0.01)
    with pytest.raises(RuntimeError, match="timed out"):
        engine.chat([_conv("t")], SamplingParams())


def test_connection_refused_is_one_clear_error():
    with socket.socket() as sock:  # a free port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    engine = OpenAIChatEngine(f"http://127.0.0.1:{port}", "m", max_retries=3, backoff_s=5)
    start = time.perf_counter()
    with pytest.raises(RuntimeError, match=f"cannot reach http://127.0.0.1:{port}/v1.*api-base"):
        engine.chat([_conv("a")], SamplingParams())
    assert time.perf_counter() - start < 2  # not retried with backoff


def test_url_and_stop_helpers():
    assert chat_completions_url("http://h:1") == "http://h:1/v1/chat/completions"
    assert chat_completions_url("http://h:1/v1/") == "http://h:1/v1/chat/completions"
    stops = ["</answer>"]
    assert restore_stop_string("<answer>Up", "stop", stops) == "<answer>Up</answer>"
    assert restore_stop_string("<answer>Up</answer>", "stop", stops) == "<answer>Up</answer>"
    assert restore_stop_string("<answer>Up", "length", stops) == "<answer>Up"
    assert restore_stop_string("no tags", "stop", stops) == "no tags"
    with pytest.raises(ValueError, match="http"):
        OpenAIChatEngine("localhost:8000", "m")
