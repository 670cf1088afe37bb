"""Reading a spec file: its text (UTF-8, at most :data:`MAX_SPEC_FILE` bytes, a named pipe
by name refused) and its data (YAML, or JSON for a ``.json`` file), not yet validated. The
job spec's and the sweep spec's loaders and the command line read spec files through it;
:mod:`danlu.core.spec` re-exports its names.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

from danlu.core.errors import SpecError
from danlu.core.spec_text import parse_text
from danlu.core.values import quoted

MAX_SPEC_FILE = 16 * 1024 * 1024
"""The most bytes a job or sweep spec file may hold (its command and env take at most
:data:`MAX_EXEC_TOTAL`; the control plane takes a request of 32 MiB): a larger one, or an
endless one such as ``/dev/zero``, is refused after that much is read (it was read whole:
a MemoryError)."""


def refuse_named_pipe(
    path: str | os.PathLike[str],
    field: str = "path",
    fix: str = "give the spec file (YAML or JSON)",
) -> None:
    """A :class:`SpecError` naming ``field`` when ``path`` names a named pipe (``mkfifo``)
    itself: opening one to read waits for a writer, with no writer for ever (``fix``: what
    to give instead). A pipe handed over open (``/dev/stdin``, the ``/dev/fd/63`` of a
    shell's ``<(...)``) is a link to it, not the pipe by name (``lstat``): not refused. A
    path that cannot be looked at is left to its reading to explain."""
    try:
        named = os.lstat(path)
    except (OSError, ValueError):  # ValueError: a NUL in the path, left to the reading
        return
    if stat.S_ISFIFO(named.st_mode):
        raise SpecError(
            field,
            f"{os.fspath(path)!r} is a named pipe, not a file: reading it waits for a writer, "
            f"maybe for ever; {fix}, or pipe the text in and give /dev/stdin",
        )


def load_spec_data(
    path: str | Path,
    field: str = "path",
    fix: str = "give the spec file (YAML or JSON)",
    kind: str = "job spec",
) -> Any:
    """The data of a job spec file (a ``kind`` of spec file: ``sweep spec``), not yet
    validated: :func:`read_spec_text`, then :func:`spec_file_data`."""
    return spec_file_data(read_spec_text(path, field, fix, kind), path)


def spec_file_data(text: str, path: str | Path) -> Any:
    """The data of the ``text`` of the spec file ``path``: YAML, or JSON for a ``.json``
    file; an empty file is an empty mapping."""
    data = parse_text(text, Path(path).suffix.lower() == ".json")
    return {} if data is None else data


def read_spec_text(
    path: str | Path,
    field: str = "path",
    fix: str = "give the spec file (YAML or JSON)",
    kind: str = "job spec",
) -> str:
    """The text of the ``kind`` of spec file (``job spec``, ``sweep spec``) at ``path``.
    Errors are :class:`SpecError`, each naming the file once (a file of more than
    :data:`MAX_SPEC_FILE` bytes too; a ``path`` that is no path, None say, names ``path``:
    it was a bare TypeError; a named pipe by name names ``field``, with ``fix``,
    :func:`refuse_named_pipe`: it blocked for ever; so does a path holding a NUL, a bare
    ValueError before)."""
    if not isinstance(path, str | os.PathLike):
        raise SpecError("path", f"must be the path of a spec file (got {quoted(path)})")
    if "\0" in os.fspath(path):  # open's "embedded null byte" was a bare ValueError
        raise SpecError(
            field, f"{quoted(os.fspath(path))} holds a NUL character, which no path holds; {fix}"
        )
    refuse_named_pipe(path, field, fix)
    p = Path(path)
    try:
        with p.open("rb") as file:
            raw = file.read(MAX_SPEC_FILE + 1)
        if len(raw) > MAX_SPEC_FILE:
            raise SpecError(
                "",
                f"{kind} {p} is larger than {MAX_SPEC_FILE // (1024 * 1024)} MiB; a spec "
                "names its data, it does not hold it: pass large data in a file",
            )
        text = raw.decode("utf-8-sig")  # a BOM, as Windows editors write, is no text
    except OSError as exc:
        raise SpecError("", f"cannot read {kind} {p}: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise SpecError("", f"{kind} {p} is not UTF-8 text ({exc}); save it as UTF-8") from None
    return text.replace("\r\n", "\n").replace("\r", "\n")  # as a text-mode read gives
