"""A webhook's URL: checked when an admin registers the webhook (:func:`check_url`: an
absolute http(s) URL with a host the sender can encode and a port in range, a password in it
with its ``/``, ``?`` and ``#`` percent-encoded), and shown in replies and error messages with
the password of a ``user:password@`` in it replaced by :data:`REDACTED` (:func:`shown_url`,
:func:`hide_password`). The webhook keeps the URL as given: the sender posts to it with the
password.
"""

from __future__ import annotations

from urllib.parse import urlsplit

import httpx

from danlu.core.errors import SpecError
from danlu.core.values import quoted

MAX_URL_LENGTH = 2048
MAX_PORT = 65535


def check_url(url: str) -> str:
    """``url`` if it is an absolute http(s) URL with a host; SpecError naming ``url`` else,
    its message quoting the URL with a password in it as ``***`` (:func:`hide_password`)."""
    if len(url) > MAX_URL_LENGTH:
        raise SpecError("url", f"must be at most {MAX_URL_LENGTH} characters")
    if any(c.isspace() or ord(c) < 32 for c in url):
        raise SpecError("url", "must not contain spaces or control characters")
    shown = quoted(hide_password(url, url))
    if _unencoded_password(url) is not None:
        raise SpecError(
            "url",
            f"{shown}: a '/', '?' or '#' in the password must be percent-encoded "
            "(%2F, %3F, %23); as given, the host would be read from the part before it",
        )
    try:
        parts = urlsplit(url)
        port = _written_port(parts.netloc)
        # urlsplit takes 0, which nothing listens on, and says "Port out of range 0-65535"
        # past 65535: one message, with the range a port may take
        in_range = port is None or 1 <= port <= MAX_PORT
        if in_range:
            _ = parts.port  # raises ValueError for a port that is no number
    except ValueError as exc:
        # urlsplit may quote the netloc, password and all: hidden there too
        raise SpecError("url", f"{shown} is not a URL: {hide_password(url, str(exc))}") from None
    if not in_range:
        raise SpecError("url", f"{shown}: the port must be between 1 and {MAX_PORT}")
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise SpecError(
            "url", f"{shown} is not an http(s) URL; write e.g. https://hooks.example/danlu"
        )
    try:
        parsed = httpx.URL(url)  # what the sender will post to: an unparsable host fails here
    except httpx.InvalidURL as exc:
        raise SpecError("url", f"{shown} is not a URL: {hide_password(url, str(exc))}") from None
    _check_host(shown, parsed)
    return url


REDACTED = "***"
"""What an API reply shows in place of the password of a webhook's URL."""


def _written_port(netloc: str) -> int | None:
    """The port ``netloc`` names when it is written in ASCII digits (the part after the
    host's last ``:``, a bracketed IPv6 host skipped); None when it names none, or names it
    otherwise (``urlsplit``'s ``port`` refuses that)."""
    host_port = netloc.rpartition("@")[2]
    if host_port.startswith("["):
        host_port = host_port.partition("]")[2]
    port = host_port.rpartition(":")[2] if ":" in host_port else ""
    return int(port) if port.isascii() and port.isdigit() else None


def shown_url(url: str) -> str:
    """``url`` as replies show it: the password of a ``user:password@`` in it replaced by
    :data:`REDACTED` (the user name stays, to tell the webhooks apart). The webhook keeps
    the URL as given: the sender posts to it with the password."""
    parts = urlsplit(url)
    if not parts.password:
        return url
    userinfo, _, hostport = parts.netloc.rpartition("@")
    user = userinfo.partition(":")[0]
    # the first occurrence of the netloc is the one after ``scheme://``
    return url.replace(parts.netloc, f"{user}:{REDACTED}@{hostport}", 1)


def hide_password(url: str, text: str) -> str:
    """``text`` (``url`` itself, or an error message about it) with the ``user:password@``
    of ``url`` written as ``user:***@``, as :func:`shown_url` shows it; found without
    parsing, so also for a URL that ``urlsplit`` or httpx refuses: the authority is what
    follows the first ``//`` up to the first ``/``, ``?`` or ``#``, as ``urlsplit`` cuts it,
    and the password what follows the first ``:`` of the part before its last ``@``."""
    unencoded = _unencoded_password(url)
    if unencoded is not None:
        return text.replace(unencoded, REDACTED)
    rest, end = _after_scheme(url)
    authority = rest[:end]
    userinfo, at, hostport = authority.rpartition("@")
    user, colon, password = userinfo.partition(":")
    if not (at and colon and password):
        return text
    return text.replace(authority, f"{user}:{REDACTED}@{hostport}")


def _after_scheme(url: str) -> tuple[str, int]:
    """What follows the first ``//`` of ``url`` (empty without one) and where its authority
    ends in it: at the first ``/``, ``?`` or ``#``, as ``urlsplit`` cuts it."""
    rest = url.partition("//")[2]
    return rest, min((i for i in map(rest.find, "/?#") if i >= 0), default=len(rest))


def _unencoded_password(url: str) -> str | None:
    """The password of ``url`` when it holds a '/', '?' or '#' not percent-encoded
    (``https://bot:pa/ss@hooks.example/``): the authority ends at that character, so it has
    no ``@`` and what follows its ``:`` is no port, and an ``@`` comes later. Everything
    from that ``:`` to the last ``@`` is taken as the password (hiding too much of a URL
    refused anyway rather than too little); None for any other URL (a bracketed IPv6 host,
    a numeric port)."""
    rest, end = _after_scheme(url)
    colon = rest.find(":", 0, end)
    if rest.startswith("[") or "@" in rest[:end] or colon < 0:
        return None
    if not rest[colon + 1 : end] or rest[colon + 1 : end].isdigit() or "@" not in rest[end:]:
        return None
    return rest[colon + 1 : rest.rfind("@")]


def _check_host(shown: str, parsed: httpx.URL) -> None:
    """A SpecError quoting ``shown`` (the URL as an error quotes it) when the sender could
    never encode its host (an empty label, one over 63 characters, an ``xn--`` label that is
    no Punycode): httpx decodes the host's A-labels (``.host``) when it builds the request,
    and the resolver encodes the host with Python's ``idna`` codec, so both are done here;
    either failing would fail every delivery."""
    host = parsed.raw_host.decode("ascii", "replace")
    try:
        _ = parsed.host  # decodes the A-labels: an idna.IDNAError, a UnicodeError
        host.encode("idna")  # what socket.getaddrinfo does: a UnicodeError
    except ValueError as exc:
        raise SpecError(
            "url",
            f"{shown}: the host {quoted(host)} is not a valid host name (each "
            f"dot-separated part 1-63 characters, an xn-- part valid Punycode): {exc}",
        ) from None
