"""How the CLI finds a local danlu server: :func:`find_server` reads the home's
``server.json`` and ``admin.token`` (written by ``danlu up``), and :func:`same_server` tells
whether two URLs name one server."""

from __future__ import annotations

import ipaddress
import json
import os
import socket
from pathlib import Path
from typing import Any

import httpx

from danlu.client.errors import NoServerError
from danlu.core.errors import ConfigError
from danlu.core.values import quoted

API_PREFIX = "/api/v1"
DEFAULT_HOME = Path("~/.danlu")
CLUSTER_EXECUTORS = ("slurm", "ray")
"""The executors other than the local one that ``server.json`` may name (``--executor``)."""


def find_server(home: Path | str | None = None) -> tuple[str, str | None]:
    """The URL (from ``home/server.json``) and admin token (``home/admin.token``, if readable)
    of the server started with ``danlu up --home home`` (a path, or its text: ``~/.danlu``).
    Raises :class:`NoServerError`, also when ``server.json`` records a server of this host
    whose process is gone (it was killed): the token is never sent to whatever listens on
    its port now. A ``home`` that is neither (a number: a bare TypeError) is a
    :class:`ConfigError`."""
    if home is not None and not isinstance(home, str | os.PathLike):
        raise ConfigError(
            f"the danlu home must be a path or its text, e.g. ~/.danlu (got {quoted(home)}): "
            "pass --home or set DANLU_HOME"
        )
    root = Path(home or DEFAULT_HOME).expanduser()
    hint = f"no danlu server found at {root}: start one with `danlu up --home {root}`"
    try:
        info = json.loads((root / "server.json").read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise NoServerError(hint) from None
    except (OSError, ValueError) as exc:  # ValueError: not JSON, or not UTF-8
        raise NoServerError(f"{hint} ({root / 'server.json'} is unreadable: {exc})") from None
    if not isinstance(info, dict) or not info.get("url"):
        raise NoServerError(f"{hint} ({root / 'server.json'} names no url)")
    if _recorded_here(info) and not _alive(info["pid"]):
        executor = info.get("executor")
        flag = f" --executor {executor}" if executor in CLUSTER_EXECUTORS else ""
        raise NoServerError(
            f"the danlu server recorded in {root / 'server.json'} (pid {info['pid']}, "
            f"{info['url']}) is not running: start one with `danlu up --home {root}{flag}`"
            + (" (and the cluster's other settings it had)" if flag else "")
        )
    try:
        token: str | None = (root / "admin.token").read_text(encoding="utf-8").strip() or None
    except (OSError, ValueError):  # ValueError: not UTF-8
        token = None
    return str(info["url"]), token


def _recorded_here(info: dict[str, Any]) -> bool:
    """Whether ``server.json``'s record names a server process of this host, whose pid
    this host can judge: one written on another host (a home on a shared filesystem), or by
    an older danlu (no ``hostname``), cannot be."""
    pid = info.get("pid")
    return (
        info.get("hostname") == socket.gethostname()
        and isinstance(pid, int)
        and not isinstance(pid, bool)
        and pid > 0
    )


def _alive(pid: int) -> bool:
    """Whether process ``pid`` of this host exists (another user's counts)."""
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, OverflowError):  # OverflowError: past any pid there can be
        return False
    except OSError:  # EPERM: another user's process
        return True
    return True


def same_server(a: str, b: str) -> bool:
    """Whether URLs ``a`` and ``b`` name one server: the same scheme, host (any case) and
    port (the scheme's default when absent), and path up to a trailing slash and the API
    prefix (:class:`Client` takes ``http://H:P`` and ``http://H:P/api/v1`` alike)."""
    try:
        x, y = httpx.URL(a), httpx.URL(b)
    except httpx.InvalidURL:
        return False
    defaults = {"http": 80, "https": 443}

    def key(u: httpx.URL) -> tuple[str, str, int | None, str]:
        path = u.path.rstrip("/").removesuffix(API_PREFIX).rstrip("/")
        return (u.scheme, u.host.lower(), u.port or defaults.get(u.scheme), path)

    return key(x) == key(y)


def shown_url(url: str) -> str:
    """``url`` as an error message may show it: a user name and password before its host
    (``http://bob:secret@host``) become ``***``."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        scheme, rest = "", url
    if "@" in rest:  # to the last one: a '/', '?' or '#' left unencoded in a password
        return f"{scheme}{sep}***@{rest.rpartition('@')[2]}"  # ends the authority early
    return url


def server_base(url: str) -> str:
    """The base URL of the server at ``url`` (``http://H:P``, with or without the API prefix
    and a trailing slash), without them; :class:`ConfigError` for one that is not
    ``http(s)://host[:port][/path]``: a port outside 1-65535, or a host httpx would send
    percent-encoded (``http://[bad``: an unclosed IPv6 bracket, a space) is refused here,
    not at the first request (a refused connection, an unknown name). A user name or
    password in it is refused: httpx would send it as Basic auth in place of the API token,
    which then never reaches the server; a query or fragment would move every request's
    path into it (``/?x`` + ``/api/v1/jobs``).
    The messages never show the password; a ``url`` that is not text (None: an unset
    environment variable) is a :class:`ConfigError` too (it was an AttributeError)."""
    if not isinstance(url, str):
        raise ConfigError(
            f"the server URL must be text such as http://127.0.0.1:8470 (got {quoted(url)}): "
            "pass --url or set DANLU_URL, or use Client.from_home() for the local server"
        )
    base = url.rstrip("/").removesuffix(API_PREFIX)
    shown = quoted(shown_url(url))
    if "@" in base:  # before httpx, whose errors may quote a piece of the password
        raise ConfigError(_USERINFO.format(shown))
    try:
        parsed = httpx.URL(base)
    except httpx.InvalidURL as exc:
        message = f"the server URL {shown} is not a URL ({exc}): give {_URL_FORM}"
        raise ConfigError(message) from None
    if parsed.scheme not in ("http", "https") or not parsed.host:
        raise ConfigError(f"the server URL {shown} must be {_URL_FORM}")
    if parsed.userinfo or "?" in base or "#" in base:
        raise ConfigError(_USERINFO.format(shown))
    if parsed.port is not None and not 1 <= parsed.port <= MAX_PORT:
        raise ConfigError(
            f"the server URL {shown} has port {parsed.port}, outside 1-{MAX_PORT}: give the "
            f"port the server listens on, as in {_URL_FORM}"
        )
    if "%" in parsed.host and ":" not in parsed.host:
        raise ConfigError(
            f"the server URL {shown} is not a URL (its host is no host name or IP address; "
            f"a bracketed IPv6 address ends with ']'): give {_URL_FORM}"
        )
    return base


def loopback_pattern(base: str) -> str | None:
    """The httpx mount pattern of ``base``'s host (``all://127.0.0.1``) when it is this
    machine's loopback (``127.0.0.0/8``, ``::1``, ``localhost``), else None: a request to
    it never goes through a proxy of the environment (``HTTP_PROXY``), whose loopback is
    not this machine's (it answered that the running server refused the connection)."""
    host = httpx.URL(base).host
    try:
        loopback = ipaddress.ip_address(host).is_loopback
    except ValueError:  # a name
        loopback = host.lower() == "localhost" or host.lower().endswith(".localhost")
    if not loopback:
        return None
    return f"all://[{host}]" if ":" in host else f"all://{host}"


MAX_PORT = 65535
"""The highest TCP port; a server URL's port is 1 to it (nothing listens on 0)."""
_URL_FORM = "http(s)://host[:port], e.g. http://127.0.0.1:8470 (--url, DANLU_URL)"
"""The form a server URL takes, and where it came from: the end of a malformed one's message."""
_USERINFO = (
    "the server URL {} holds a user name, password, query or fragment; give "
    "http(s)://host[:port] and the API token apart (--token, DANLU_TOKEN)"
)
