"""A loopback OpenAI-compatible completions server for the claim jobs' tests: the real
`openai` client and backend talk HTTP to it, and each test says what the model answers.

Why a helper: the tests that run a claim job over HTTP each need the same server (one
`/v1/completions` reply per prompt, no log-probs); only the answer and what the test
records of each request differ.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

#: How often a serving loop looks for `shutdown()`. The standard library's 0.5 s was the
#: wait after every test that stopped a server: 0.5 s each for 36 of test_openai_backend's
#: 62 tests.
POLL_S = 0.01


def serve_in_background(srv: ThreadingHTTPServer) -> ThreadingHTTPServer:
    """Start ``srv`` on a daemon thread, polling for shutdown every :data:`POLL_S` seconds,
    so that stopping it after a test costs no half-second wait."""
    srv.daemon_threads = True
    threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": POLL_S}, daemon=True).start()
    return srv


def serve_completions(answer: Callable[[str], str], on_prompt: Callable[[str], None] | None = None) -> ThreadingHTTPServer:
    """A started server on a free loopback port that answers each completions request
    with ``answer(prompt)``, after ``on_prompt(prompt)`` (which records the prompt, or
    waits, as the test needs; requests arrive on several threads). The caller shuts it
    down (``srv.shutdown()``)."""

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *a: object) -> None:
            pass

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            if on_prompt is not None:
                on_prompt(body["prompt"])
            out = {
                "id": "x",
                "object": "text_completion",
                "created": 0,
                "model": body["model"],
                "choices": [{"index": 0, "text": answer(body["prompt"]), "finish_reason": "stop", "logprobs": None}],
            }
            data = json.dumps(out).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    return serve_in_background(ThreadingHTTPServer(("127.0.0.1", 0), Handler))
