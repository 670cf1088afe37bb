"""``file:`` URLs naming a local checkpoint directory (RFC 8089), read the same way by the
spec's checks, the control plane (the launch, the retention) and ``danlu.train``.

A location is a file URL when it starts with ``file:``, its scheme in any case
(``FILE:///shared/ckpt`` is ``file:///shared/ckpt``). Its forms:

- ``file:///shared/ckpt`` (no host) and ``file://localhost/shared/ckpt`` (this machine by
  name, in any case): the directory ``/shared/ckpt``;
- ``file:/shared/ckpt`` (RFC 8089's form without an authority, as Java writes one): the same;
- ``file://HOST/...`` with any other host, a ``file:`` URL of a relative path
  (``file:ckpt``) and one of no path (``file://``, ``file://localhost``): no directory of this
  machine, refused (:class:`FileUrlError`). ``file://ckpt/run1`` and ``file://~/ckpt`` are
  of the host ``ckpt`` and ``~``: no relative path, as the text after ``file://`` was once
  taken for.

The path is percent-decoded (``file:///tmp/my%20runs`` is ``/tmp/my runs``; ``%25`` is a
literal ``%``) as UTF-8; a ``%`` not followed by two hex digits stays as written. A path
that decodes to a NUL or to bytes that are no UTF-8 is refused. ``?`` and ``#`` are part of
the path (no query or fragment is read). A plain path (no scheme) is never decoded."""

from __future__ import annotations

import re
from urllib.parse import unquote_to_bytes

from danlu.core.errors import DanluError
from danlu.core.values import quoted

FILE_URL = "file://"
"""The start of a ``checkpoint_dir`` URL naming a local directory with an authority, in lower
case as a spec holds it (:class:`~danlu.core.spec.JobSpec` writes ``FILE://`` so)."""
FILE_SCHEME = "file:"
"""The scheme of a file URL, with its colon, in lower case."""
LOCAL_HOSTS = ("", "localhost")
"""The hosts (in lower case) of a ``file://`` URL that name this machine."""
_ESCAPE = re.compile(r"%[0-9A-Fa-f]{2}")


class FileUrlError(DanluError, ValueError):
    """A file URL that names no directory of this machine; the message says why and starts
    with the URL quoted, for a caller to add the field it was given in and the fix."""


def is_file_url(location: str) -> bool:
    """Whether ``location`` starts with ``file:``, in any case: a file URL, whatever follows."""
    return location[: len(FILE_SCHEME)].lower() == FILE_SCHEME


def lower_file_scheme(location: str) -> str:
    """``location`` with a file URL's scheme in lower case (``FILE:///x`` is ``file:///x``),
    nothing else changed (nothing decoded: a spec holds the URL as written); any other
    location as it is."""
    return FILE_SCHEME + location[len(FILE_SCHEME) :] if is_file_url(location) else location


def local_file_path(location: str) -> str | None:
    """The absolute path of this machine that the file URL ``location`` names,
    percent-decoded (the module's rules); None for a location that is no file URL (a path,
    another URL). Raises :class:`FileUrlError` for a file URL naming no directory here."""
    if not is_file_url(location):
        return None
    rest = location[len(FILE_SCHEME) :]
    if rest.startswith("//"):
        host, slash, path = rest[2:].partition("/")
        if host.lower() not in LOCAL_HOSTS:
            raise FileUrlError(
                f"{quoted(location)} names the host {quoted(host)} (what comes between "
                "file:// and the next /), not this machine: a file:// URL names a directory "
                "here with no host (file:///shared/ckpt) or localhost; read as a path, "
                f"{quoted(rest[2:])} would be a relative path, resolved against whatever "
                "directory the job starts in"
            )
        path = slash + path
    else:
        path = rest
    if not path:
        raise FileUrlError(f"{quoted(location)} is a file URL of no path, which names no directory")
    if not path.startswith("/"):
        raise FileUrlError(
            f"{quoted(location)} is a file URL of the relative path {quoted(path)}, which the "
            "job would resolve against whatever directory it starts in"
        )
    return _decoded(location, path)


def _decoded(location: str, path: str) -> str:
    """``path`` (of the URL ``location``) with its ``%XX`` escapes decoded as UTF-8."""
    if "%" not in path:
        return path
    try:
        raw = unquote_to_bytes(path.encode("utf-8", "surrogateescape"))
        decoded = raw.decode("utf-8")
    except UnicodeError:
        escapes = ", ".join(dict.fromkeys(_ESCAPE.findall(path)))
        raise FileUrlError(
            f"{quoted(location)} is no UTF-8 once its escapes ({escapes}) are decoded: a file "
            "URL's path is percent-encoded UTF-8 (write a character as itself or as the %XX "
            "of each of its UTF-8 bytes, and a literal % as %25)"
        ) from None
    if "\x00" in decoded:
        raise FileUrlError(
            f"{quoted(location)} holds a NUL once decoded (%00), which no path can hold "
            "(write a literal % as %25)"
        )
    return decoded


def file_url_path(location: str) -> str | None:
    """What the control plane asks of a spec's ``checkpoint_dir``, which never fails (a spec
    stored before may hold any text): the absolute path a file URL names
    (:func:`local_file_path`), ``""`` for a file URL naming no directory of this machine
    (which is no absolute path: such a spec is refused at submission, and one stored before
    is launched with a directory of the job's own), None for a location that is no file URL."""
    try:
        return local_file_path(location)
    except FileUrlError:
        return ""
