"""Where the prompts and the API key go, and who allowed it.

A study file is often written by someone other than the person who runs it (docs/SECURITY.md),
so the file alone cannot send anything off this machine:

- A ``base_url`` whose host is not loopback is used only when the study says
  ``allow_remote: true`` *and* the person running the command names that host:
  ``--allow-remote HOST`` on the command line (``lookahead check|jobs|run``, which hand it
  to the job process llm_jobs.run_all), or the environment variable ``LOOKAHEAD_ALLOW_REMOTE``
  (hosts separated by commas). ``--yes`` answers the cost question only; it never stands
  for this consent.
- The environment variable sent as the key (``api_key_env``) must look like an API key
  variable, its name matching ``API_KEY_VARIABLE`` (``OPENAI_API_KEY``, ``TOGETHER_API_TOKEN``,
  ``API_KEY``), or be named by the person running the command: ``--api-key-env NAME`` or
  ``LOOKAHEAD_API_KEY_ENV``. So a study cannot make ``AWS_SECRET_ACCESS_KEY`` or
  ``GITHUB_TOKEN`` a Bearer token.
- ``lookahead check`` and the jobs' confirmation print the destination: host, whether it
  is remote, and the variable (never its value).

The command-line flags are written to these environment variables by the command that
reads them, so the jobs it starts (preflight, jobs, claim jobs) read the same consent
from one place (``Consent.from_environment``)."""

from __future__ import annotations

import argparse
import ipaddress
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlparse

from lookahead.errors import StudyConfigError

#: the environment variables that carry the consent of the person running the command
ALLOW_REMOTE_ENV = "LOOKAHEAD_ALLOW_REMOTE"
API_KEY_ENV_ENV = "LOOKAHEAD_API_KEY_ENV"
#: the names a study may give as api_key_env on its own: ..._API_KEY or ..._API_TOKEN
API_KEY_VARIABLE = re.compile(r"^(?:[A-Z][A-Z0-9_]*_)?API_(?:KEY|TOKEN)$")
_HOST = re.compile(r"^[a-z0-9.\-_:\[\]]+$")


class ConsentError(StudyConfigError):
    """A destination or key variable the person running the command did not allow."""


def host_of(url_or_host: str) -> str:
    """The lower-case host name of a URL, or of a bare host (with or without a port)."""
    text = url_or_host.strip()
    if "://" not in text:
        text = "http://" + text
    try:
        return (urlparse(text).hostname or "").strip("[]").lower()
    except ValueError:
        return ""


def is_loopback_url(base_url: str) -> bool:
    """True when the URL's host is this machine (127.0.0.0/8, ::1 or localhost).

    Host names other than localhost are not resolved: a name is treated as remote, which
    errs on the side of asking for consent."""
    host = host_of(base_url)
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _names(value: str | None) -> frozenset[str]:
    return frozenset(x.strip() for x in (value or "").split(",") if x.strip())


@dataclass(frozen=True)
class Consent:
    """What the person running the command allowed: remote hosts, and key variables
    beyond those that look like one."""

    hosts: frozenset[str] = frozenset()
    key_variables: frozenset[str] = frozenset()

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] | None = None) -> Consent:
        env = os.environ if environ is None else environ
        hosts = frozenset(h for h in (host_of(x) for x in _names(env.get(ALLOW_REMOTE_ENV))) if h)
        return cls(hosts=hosts, key_variables=_names(env.get(API_KEY_ENV_ENV)))


def grant(hosts: list[str] | None, key_variables: list[str] | None, environ: dict[str, str] | os._Environ | None = None) -> None:
    """Record the command line's --allow-remote and --api-key-env in the environment the
    command and its child processes read (added to what is already there). A host that
    is not a host name, or a variable name that is not one, is refused in one line."""
    env = os.environ if environ is None else environ
    for host in hosts or []:
        if not host_of(host) or not _HOST.match(host_of(host)):
            raise ConsentError(f"--allow-remote: '{host}' is not a host name")
    for name in key_variables or []:
        if not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", name):
            raise ConsentError(f"--api-key-env: '{name}' is not an environment variable name")
    if hosts:
        env[ALLOW_REMOTE_ENV] = ",".join(sorted(_names(env.get(ALLOW_REMOTE_ENV)) | {host_of(h) for h in hosts}))
    if key_variables:
        env[API_KEY_ENV_ENV] = ",".join(sorted(_names(env.get(API_KEY_ENV_ENV)) | set(key_variables)))


@dataclass(frozen=True)
class Destination:
    """Where an API backend sends the prompts, and which variable goes with them."""

    base_url: str
    key_variable: str | None

    @property
    def host(self) -> str:
        return host_of(self.base_url)

    @property
    def remote(self) -> bool:
        return not is_loopback_url(self.base_url)

    def describe(self) -> str:
        """One line for `lookahead check` and the confirmation: host, remote or not, variable."""
        where = (
            f"REMOTE host {self.host} (prompts, texts and entity names leave this machine)"
            if self.remote
            else f"host {self.host} (loopback: this machine)"
        )
        key = f"the value of ${self.key_variable} sent as the API key" if self.key_variable else "no API key sent"
        return f"sends to {where}; {key}"

    def check(self, study_allows_remote: bool, consent: Consent | None = None) -> None:
        """Nothing, when the person running the command allowed this destination and
        variable; else ConsentError in one line saying what to pass."""
        consent = Consent.from_environment() if consent is None else consent
        if self.remote:
            if not study_allows_remote:
                raise ConsentError(
                    f"setting 'allow_remote': base_url host '{self.host}' is not on this machine; "
                    "sending your text and entity names there needs allow_remote: true in the study "
                    f"and --allow-remote {self.host} on the command line"
                )
            if self.host not in consent.hosts:
                raise ConsentError(
                    f"setting 'base_url': host '{self.host}' is remote and the study file alone cannot "
                    f"send your text there; rerun with --allow-remote {self.host} (or set "
                    f"{ALLOW_REMOTE_ENV}={self.host}) if you mean to"
                )
        name = self.key_variable
        if name and not API_KEY_VARIABLE.match(name) and name not in consent.key_variables:
            raise ConsentError(
                f"setting 'api_key_env': '{name}' does not look like an API key variable (a name "
                f"ending in _API_KEY or _API_TOKEN); rerun with --api-key-env {name} (or set "
                f"{API_KEY_ENV_ENV}={name}) if you mean to send it"
            )


class GrantAction(argparse.Action):
    """``--allow-remote HOST`` / ``--api-key-env NAME``: recorded in the environment as
    soon as it is parsed (grant), so this command and the jobs it starts read it; a bad
    value is argparse's one-line usage error."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: str | Sequence[Any] | None,
        option_string: str | None = None,
    ) -> None:
        value = str(values)
        try:
            if self.dest == "allow_remote":
                grant([value], None)
            else:
                grant(None, [value])
        except ConsentError as err:
            raise argparse.ArgumentError(self, str(err)) from None
        items = list(getattr(namespace, self.dest, None) or [])
        setattr(namespace, self.dest, [*items, value])


def add_consent_arguments(parser: argparse.ArgumentParser) -> None:
    """The two flags by which the person running a command allows a destination."""
    parser.add_argument(
        "--allow-remote",
        action=GrantAction,
        default=[],
        metavar="HOST",
        help="allow sending prompts (texts, entity names) and the API key to this "
        "non-loopback host of the study's base_url (repeatable; also "
        f"${ALLOW_REMOTE_ENV}); --yes never implies it",
    )
    parser.add_argument(
        "--api-key-env",
        action=GrantAction,
        default=[],
        metavar="NAME",
        help="allow the study's api_key_env to name this variable although its "
        f"name does not end in _API_KEY or _API_TOKEN (also ${API_KEY_ENV_ENV})",
    )
