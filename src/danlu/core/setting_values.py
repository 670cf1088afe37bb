"""The grammars of the control plane's settings' values, read without the environment:
policy options (``DANLU_POLICY_OPTIONS``, ``--policy-option``, ``danlu sim --option``),
``sbatch`` options (``DANLU_SLURM_SBATCH_OPTIONS``), a fake GPU inventory named by its
variable (``DANLU_FAKE_GPUS``) and database URLs (``DANLU_DATABASE_URL``). :mod:`danlu.config`
reads the variables and re-exports these, its public names."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path
from typing import Any

from danlu.core.errors import ConfigError
from danlu.core.fake_gpus import FakeGroup, parse_fake_gpus


def check_fake_gpus(value: str, variable: str = "DANLU_FAKE_GPUS") -> tuple[FakeGroup, ...]:
    """The groups of the fake inventory ``value`` (``DANLU_FAKE_GPUS``, ``danlu up
    --fake-gpus``) describes, read by :func:`~danlu.core.fake_gpus.parse_fake_gpus`, the one
    grammar the server builds it with: ``COUNTxSIZE`` or ``COUNTxTYPE`` (``4x80GiB``,
    ``8xH100``), optionally ``COUNTxSIZE:TYPE``, a comma-separated group a node. Raises
    :class:`ConfigError` naming ``variable``."""
    try:
        return parse_fake_gpus(value)
    except ConfigError as exc:
        raise ConfigError(f"{variable}: {exc}") from None


def _option(key: str, value: Any) -> tuple[str, Any]:
    """A policy option as the policies take it: ``-`` in the name read as ``_``, a list
    value as a tuple."""
    return key.strip().replace("-", "_"), tuple(value) if isinstance(value, list) else value


def parse_policy_options(text: str) -> dict[str, Any]:
    """``DANLU_POLICY_OPTIONS``: a JSON object of option name -> value (lists become
    tuples). Raises :class:`ValueError` saying what is wrong with it."""
    try:
        parsed = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"not JSON ({exc.msg} at character {exc.pos})") from None
    if not isinstance(parsed, dict):
        raise ValueError(f"a JSON object is needed, got {type(parsed).__name__}")
    if any(not key.strip() for key in parsed):
        raise ValueError("an option name is empty")
    return dict(_option(key, value) for key, value in parsed.items())


def parse_option_pairs(pairs: list[str], flag: str) -> dict[str, Any]:
    """``key=value`` policy options from the command line (``flag``: the option's name in
    errors); values are parsed as JSON when they can be, else kept as strings."""
    options: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ConfigError(f"{flag} {pair!r} must look like key=value, e.g. placement=best-fit")
        try:
            parsed = json.loads(value)
        except json.JSONDecodeError:
            parsed = value
        name, option = _option(key, parsed)
        options[name] = option
    return options


def split_sbatch_options(value: str) -> tuple[str, ...]:
    """``DANLU_SLURM_SBATCH_OPTIONS`` split into argv items (quotes as a shell reads them;
    nothing is run through a shell). Each must be an option (``-x`` or ``--name[=value]``)."""
    try:
        items = tuple(shlex.split(value))
    except ValueError as exc:
        raise ValueError(f"cannot split {value!r}: {exc}") from None
    for item in items:
        if not item.startswith("-") or "\0" in item:
            raise ValueError(f"{item!r} is not an sbatch option; write --name=value")
    return items


def normalise_database_url(url: str) -> str:
    """Map ``postgres://`` / ``postgresql://`` to the psycopg 3 driver; check the scheme."""
    for prefix in ("postgres://", "postgresql://"):
        if url.startswith(prefix):
            return "postgresql+psycopg://" + url[len(prefix) :]
    if url.startswith(("sqlite://", "postgresql+psycopg://")):
        return url
    raise ValueError(f"unsupported database URL scheme in {url.split(':', 1)[0]!r}")


_BAD_URL = (
    "not a database URL (--database-url): {what}; a user name or password holding '@', ':' "
    "or '/' must be percent-encoded (%40, %3A, %2F)"
)


# A URL's user name and password, read as SQLAlchemy reads them: the password ends at its
# first '@', so every '@' after that one is in the host or the database name.
_USER_INFO = re.compile(r"[^:/]*(?::[^@]*)?@")


def _at_after_user_info(url: str) -> bool:
    """Whether ``url`` (not SQLite) holds a literal ``@`` after its user name and password
    (before its query string): a password's ``@`` that was not percent-encoded, the rest of
    the password then read as the host or the database name."""
    rest = url.partition("://")[2].partition("?")[0]
    user_info = _USER_INFO.match(rest)
    return "@" in rest[user_info.end() if user_info else 0 :]


def check_database_url(url: str) -> str:
    """``url`` normalised (:func:`normalise_database_url`) and parsed once, as the server
    will open it: a :class:`ValueError` that never shows the URL (its password) when it
    cannot be parsed, when a host or database name holds a literal ``@`` (a password's,
    not percent-encoded), or when it names an in-memory SQLite database, which each of the
    server's connections (the migration's, the requests') would see empty."""
    from sqlalchemy.engine import make_url  # here: the CLI's own settings need no SQLAlchemy
    from sqlalchemy.exc import ArgumentError

    url = normalise_database_url(url)
    try:
        parsed = make_url(url)
    except ValueError:  # int() of the port, which may hold a piece of the password
        what = "the port after its host is not a number (an IPv6 host goes in brackets: [::1])"
        raise ValueError(_BAD_URL.format(what=what)) from None
    except ArgumentError:
        raise ValueError(_BAD_URL.format(what="it cannot be parsed")) from None
    if parsed.get_backend_name() != "sqlite" and _at_after_user_info(url):
        what = "its host or database name holds '@'"
        raise ValueError(_BAD_URL.format(what=what))
    if parsed.get_backend_name() == "sqlite":
        database = parsed.database or ""
        if (
            database in ("", ":memory:")
            or database.startswith("file::memory:")
            or parsed.query.get("mode") == "memory"
        ):
            raise ValueError(
                "an in-memory SQLite database (--database-url) is not kept, and each of the "
                "server's connections would see one of its own: give a file"
            )
    return url


def sqlite_url(path: Path) -> str:
    """The ``sqlite:///`` URL of the file ``path`` that SQLAlchemy reads back as ``path``
    (``make_url(url).database``), rendered by SQLAlchemy with its own percent-encoding: put
    in unescaped, a ``?`` began a query string and a ``%2F`` was decoded, so the database
    was another file. Raises :class:`ValueError` for a path no such URL can name (one that
    is no UTF-8 text, or a SQLAlchemy that does not decode what it encodes)."""
    from sqlalchemy.engine import URL, make_url  # here: the CLI's own settings need none

    try:
        url = URL.create("sqlite", database=str(path)).render_as_string(hide_password=False)
    except UnicodeError:
        url = None
    if url is None or make_url(url).database != str(path):
        raise ValueError(f"the database path {str(path)!r} cannot be written as a URL")
    return url
