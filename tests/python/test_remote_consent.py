"""No environment variable and no prompt leaves the machine on the study file's word alone.

The attack: a study file sets a remote `base_url`, `allow_remote: true` and
`api_key_env: AWS_SECRET_ACCESS_KEY`; the jobs, run with `--yes`, sent every prompt with
that variable as a Bearer token. The "remote" host here is a real OpenAI-compatible
server bound to this machine's non-loopback address (what `lookahead.consent` treats as
remote), driven by the real `openai` client through the jobs' own entry points. The
person running the command allows a host with `--allow-remote HOST`, a variable whose
name does not look like a key with `--api-key-env NAME`; `check` and the confirmation
name the host, whether it is remote, and the variable."""

from __future__ import annotations

import contextlib
import os
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from completion_server import serve_in_background
from test_openai_backend import FakeOpenAIState, _handler, write_openai_study

from lookahead.consent import (
    ALLOW_REMOTE_ENV,
    API_KEY_ENV_ENV,
    API_KEY_VARIABLE,
    Consent,
    ConsentError,
    Destination,
    grant,
)


def _own_address() -> str | None:
    """This machine's address on its network (not loopback), or None."""
    candidates = []
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect(("192.0.2.1", 9))  # no packet is sent: picks the outgoing interface
            candidates.append(s.getsockname()[0])
    except OSError:
        pass
    with contextlib.suppress(OSError):
        candidates += socket.gethostbyname_ex(socket.gethostname())[2]
    return next((a for a in candidates if not a.startswith("127.") and a != "0.0.0.0"), None)


ADDRESS = _own_address()
needs_address = pytest.mark.skipif(ADDRESS is None, reason="this machine has no non-loopback address")


@pytest.fixture
def remote_server() -> Iterator[Any]:
    """A fake OpenAI server on this machine's network address: a remote host to the tool."""
    state = FakeOpenAIState()
    from http.server import ThreadingHTTPServer

    httpd = serve_in_background(ThreadingHTTPServer((ADDRESS, 0), _handler(state)))
    yield f"http://{ADDRESS}:{httpd.server_address[1]}/v1", state
    httpd.shutdown()
    httpd.server_close()


@pytest.fixture(autouse=True)
def no_consent(monkeypatch: pytest.MonkeyPatch) -> None:
    """No consent from the environment; whatever a test's command grants is undone after it."""
    monkeypatch.setenv(ALLOW_REMOTE_ENV, "")
    monkeypatch.setenv(API_KEY_ENV_ENV, "")


def _forecast(study: Path, *flags: str) -> int:
    from llm_jobs import run_all

    return run_all.main(["--only", "forecast", "--study", str(study), "--yes", *flags])


@needs_address
def test_study_file_alone_sends_no_secret_to_a_remote_host(
    remote_server,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
) -> None:
    url, state = remote_server
    secret = "AKIA-" + os.urandom(10).hex()
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", secret)
    study = write_openai_study(tmp_path, url, "attack", 6, allow_remote=True, api_key_env="AWS_SECRET_ACCESS_KEY")
    assert _forecast(study) != 0  # --yes given, allow_remote: true in the study: still refused
    out = capfd.readouterr()
    assert state.requests == 0 and not state.auth_headers
    assert f"--allow-remote {ADDRESS}" in out.err and "Traceback" not in out.err + out.out
    assert secret not in out.out + out.err
    # the host allowed, the variable still not: its name is not a key variable's
    assert _forecast(study, "--allow-remote", ADDRESS) != 0
    out = capfd.readouterr()
    assert state.requests == 0
    assert "api_key_env" in out.err and "AWS_SECRET_ACCESS_KEY" in out.err and secret not in out.err


@needs_address
def test_named_host_and_key_variable_are_used_and_shown(
    remote_server,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
) -> None:
    url, state = remote_server
    secret = "sk-remote-" + os.urandom(10).hex()
    monkeypatch.setenv("LOOKAHEAD_REMOTE_API_KEY", secret)
    study = write_openai_study(tmp_path, url, "named", 6, allow_remote=True, api_key_env="LOOKAHEAD_REMOTE_API_KEY")
    # another host named: not this one
    assert _forecast(study, "--allow-remote", "api.example.com") != 0
    assert state.requests == 0
    capfd.readouterr()
    assert _forecast(study, "--allow-remote", ADDRESS) == 0
    out = capfd.readouterr().out
    assert f"Bearer {secret}" in state.auth_headers and state.requests >= 6
    # the confirmation line names the host, that it is remote, and the variable (not its value)
    line = next(x for x in out.splitlines() if "sends to" in x)
    assert f"REMOTE host {ADDRESS}" in line and "$LOOKAHEAD_REMOTE_API_KEY" in line
    assert secret not in out


def test_key_variable_refused_on_loopback_too_unless_named(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
) -> None:
    from http.server import ThreadingHTTPServer

    from test_openai_backend import _handler as handler

    state = FakeOpenAIState()
    httpd = serve_in_background(ThreadingHTTPServer(("127.0.0.1", 0), handler(state)))
    try:
        url = f"http://127.0.0.1:{httpd.server_address[1]}/v1"
        secret = "ghp_" + os.urandom(10).hex()
        monkeypatch.setenv("GITHUB_TOKEN", secret)
        study = write_openai_study(tmp_path, url, "local", 4, api_key_env="GITHUB_TOKEN")
        assert _forecast(study) != 0
        err = capfd.readouterr().err
        assert state.requests == 0 and "--api-key-env GITHUB_TOKEN" in err and secret not in err
        assert _forecast(study, "--api-key-env", "GITHUB_TOKEN") == 0  # the person named it
        out = capfd.readouterr().out
        assert f"Bearer {secret}" in state.auth_headers
        assert "host 127.0.0.1 (loopback: this machine)" in out and "$GITHUB_TOKEN" in out
    finally:
        httpd.shutdown()
        httpd.server_close()


@needs_address
def test_check_names_host_remote_and_variable(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
) -> None:
    from lookahead.cli import main

    url = f"http://{ADDRESS}:9/v1"
    study = write_openai_study(tmp_path, url, "checked", 4, allow_remote=True, api_key_env="OPENAI_API_KEY")
    assert main(["check", "--study", str(study)]) == 2
    out = capfd.readouterr()
    assert f"sends to REMOTE host {ADDRESS}" in out.out and "$OPENAI_API_KEY" in out.out
    assert f"--allow-remote {ADDRESS}" in out.err
    assert out.err.count("\n") == 1 and "Traceback" not in out.err


@pytest.mark.parametrize(
    "name,ok",
    [
        ("OPENAI_API_KEY", True),
        ("LOOKAHEAD_API_KEY", True),
        ("TOGETHER_API_TOKEN", True),
        ("API_KEY", True),
        ("AWS_SECRET_ACCESS_KEY", False),
        ("GITHUB_TOKEN", False),
        ("HF_TOKEN", False),
        ("PATH", False),
        ("HOME", False),
        ("openai_api_key", False),
        ("DATABASE_PASSWORD", False),
        ("SSH_AUTH_SOCK", False),
    ],
)
def test_key_variable_rule(name: str, ok: bool) -> None:
    assert bool(API_KEY_VARIABLE.match(name)) is ok
    dest = Destination("http://127.0.0.1:8000/v1", name)
    if ok:
        dest.check(False, Consent())
    else:
        with pytest.raises(ConsentError, match=f"--api-key-env {name}"):
            dest.check(False, Consent())
        dest.check(False, Consent(key_variables=frozenset({name})))


@pytest.mark.parametrize(
    "url", ["https://api.example.com/v1", "http://10.0.0.5:8000/v1", "http://localhost.example.com/v1", "http://[fd00::2]:80/v1"]
)
def test_remote_needs_the_study_and_the_command_line(url: str) -> None:
    dest = Destination(url, None)
    assert dest.remote
    with pytest.raises(ConsentError, match="allow_remote"):
        dest.check(False, Consent(hosts=frozenset({dest.host})))
    with pytest.raises(ConsentError, match=f"--allow-remote {dest.host}"):
        dest.check(True, Consent())
    with pytest.raises(ConsentError):  # consent for another host is not consent for this one
        dest.check(True, Consent(hosts=frozenset({"api.other.example"})))
    dest.check(True, Consent(hosts=frozenset({dest.host})))


def test_grant_records_consent_and_refuses_bad_values() -> None:
    env: dict[str, str] = {}
    grant(["API.Example.com", "https://other.example:8443/v1"], ["HF_TOKEN"], env)
    consent = Consent.from_environment(env)
    assert consent.hosts == {"api.example.com", "other.example"} and consent.key_variables == {"HF_TOKEN"}
    with pytest.raises(ConsentError, match="--allow-remote"):
        grant(["bad host;rm"], None, env)
    with pytest.raises(ConsentError, match="--api-key-env"):
        grant(None, ["$(id)"], env)


def test_bad_flag_value_is_one_usage_line(capfd: pytest.CaptureFixture[str]) -> None:
    from lookahead.cli import main

    with pytest.raises(SystemExit) as exit_:
        main(["check", "--api-key-env", "A B"])
    assert exit_.value.code == 2
    err = capfd.readouterr().err
    assert "--api-key-env: 'A B' is not an environment variable name" in err and "Traceback" not in err
