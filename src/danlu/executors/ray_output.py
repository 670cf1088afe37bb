"""Appending the output of a Ray run's actors to the job's log, line by line.

Each node's :class:`~danlu.executors.ray_actor.NodeRun` hands out its output from an offset in
whole lines, but for two kinds of piece: an exited command's last line, which it may have left
without a newline, and a piece of a line longer than :data:`~danlu.executors.ray_actor.CHUNK`,
whose rest comes at a later poll. The log on the control plane's host is one file for every
node of the run, so :func:`append_output` keeps each line whole:

- A command's last line (its actor's final piece) gets a newline when it has none, or the next
  node's output (or the next run's) would join it.
- A piece of a longer line is written as it is and the log is left *open* on that node's line:
  its next piece continues it. While the node goes on with its line, the other nodes' pieces
  wait (their offsets are not advanced, so their actors hand them out again); only one line can
  be open at a time, so of several such pieces at one poll the first node's is written. When
  the open line's node has nothing new at a poll while another node has, or its actor is gone,
  the line is closed with a newline first.

The control plane is the log's one writer: the actors' output reaches it only through these
appends, so the cap on its size (``DANLU_LOG_MAX_MB``: the launch record's ``log_max_bytes``)
is kept here, after each append (:func:`cap_log`), as the local executor's supervisor keeps
a local run's (:class:`~danlu.executors.logcap.LogCap`).
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from danlu.executors import logcap, supervise
from danlu.executors.ray_records import read_offsets

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Appended:
    """What :func:`append_output` wrote."""

    taken: frozenset[int]
    """The indexes of the answers whose output is in the log now: their offsets advance; the
    others' output is handed out again at the next poll."""
    open_line: int | None
    """The node (an index of the answers) whose line the log now ends in the middle of."""


def append_output(
    log_path: str, answers: Sequence[Mapping[str, Any] | None], open_line: int | None
) -> Appended:
    """Append the new output of the ``answers`` (the actors' statuses, None for an actor that
    is gone) to the log at ``log_path``, which ends in the middle of node ``open_line``'s line
    (None: at a line's end). See the module's docstring for the order. A log that is a
    symbolic link (not followed), not a regular file or one with other hard links (the job's
    doing: it can write the log's directory) gets nothing, with a warning logged: the output
    is dropped, never written into the file a link names."""
    pieces: dict[int, tuple[bytes, bool]] = {
        i: (a["output"], a["exit_code"] is not None and not a["more"])  # (piece, its last?)
        for i, a in enumerate(answers)
        if a is not None and a["output"]
    }
    out: list[bytes] = []
    taken: set[int] = set()
    current = open_line
    if current is not None and (current >= len(answers) or answers[current] is None):
        out.append(b"\n")  # its actor is gone: no rest of the line to come
        current = None

    def write(index: int) -> None:
        nonlocal current
        data, last = pieces[index]
        if current is not None and current != index:
            out.append(b"\n")  # the open line's node has nothing new now
        out.append(data)
        taken.add(index)
        if data.endswith(b"\n"):
            current = None
        elif last:
            out.append(b"\n")
            current = None
        else:
            current = index

    if current is not None and current in pieces:
        write(current)
    if current is None or current not in taken:  # else its line goes on: the others wait
        rest = [i for i in sorted(pieces) if i not in taken]
        for index in rest:
            data, last = pieces[index]
            if data.endswith(b"\n") or last:
                write(index)
        partial = [i for i in rest if i not in taken]
        if partial:
            write(partial[0])
    if out:
        _append(log_path, b"".join(out))
    return Appended(frozenset(taken), current)


def append_run_output(
    log_file: Path,
    run_dir: Path,
    launch: dict[str, Any],
    answers: Sequence[Mapping[str, Any] | None],
) -> bool:
    """Append the new output of the actors of the run in ``run_dir`` (``answers``, by rank) to
    the job's log ``log_file`` (:func:`append_output`), and record in its launch record
    ``launch`` how far each has been read and which node's line the log ends in (a control
    plane that restarts reads on from there). A log that cannot be written now (a full disk)
    gets nothing, with a warning logged: no offset advances, so the actors hand the output
    out again at the next poll, and False is returned (the run is not to be taken as ended
    meanwhile: its actors, killed, would take the output with them). A log directory
    removed since the launch is made again. Raises :class:`ExecutorError` for a record whose
    offsets do not match its actors (:func:`~danlu.executors.ray_records.read_offsets`).
    A log that passed the record's cap once appended to is capped (:func:`cap_log`)."""
    offsets = read_offsets(run_dir, launch)
    before = launch.get("open_line")
    try:
        log_file.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        appended = append_output(str(log_file), answers, before)
    except OSError as exc:  # raised out of poll, it ended the control plane's whole pass
        log.warning("cannot append the output of %s to %s: %s", run_dir.name, log_file, exc)
        return False
    if not appended.taken and appended.open_line == before:
        return True
    cap_log(log_file, launch)
    launch["offsets"] = [
        a["offset"] if a is not None and i in appended.taken else old
        for i, (a, old) in enumerate(zip(answers, offsets, strict=True))
    ]
    if appended.open_line is None:
        launch.pop("open_line", None)
    else:
        launch["open_line"] = appended.open_line
    with contextlib.suppress(OSError):  # read again (and logged twice) after a restart
        supervise.write_json(run_dir / supervise.LAUNCH, launch)
    return True


def cap_log(log_file: Path, launch: Mapping[str, Any]) -> bool:
    """Keep the job's log ``log_file`` under the cap of the run's launch record ``launch``
    (its ``log_max_bytes``, at least :data:`~danlu.executors.logcap.LOG_CAP_MIN_BYTES`; none:
    no cap): past it, its newest part moves to ``JOB_ID.log.1`` and the log starts anew with
    a line saying so (:meth:`~danlu.executors.logcap.LogCap.check`); whether it did. A log
    that is missing, a link or not a regular file is left alone (:func:`_append` wrote
    nothing to it); a cap that fails is logged as a warning."""
    cap = logcap.log_cap_bytes(dict(launch))
    if cap is None:
        return False
    try:  # most polls: under the cap, told by one stat (no open on every append)
        if log_file.stat().st_size <= cap:
            return False
        opened = supervise.open_regular(log_file, os.O_WRONLY | os.O_APPEND)
    except OSError:
        return False
    if isinstance(opened, str):
        return False
    try:
        return logcap.LogCap(
            opened,
            cap,
            log_file,
            lambda kept: supervise.atomic_file(kept, sync=False),
            lambda said: log.warning("log %s: %s", log_file, said),
        ).check()
    finally:
        os.close(opened)


def _append(log_path: str, data: bytes) -> None:
    """Append ``data`` to the regular file ``log_path`` (made, 0600, when missing); nothing
    to a link there, a file that is not regular or has other hard links (:func:`append_output`,
    :func:`~danlu.executors.supervise.open_regular`)."""
    opened = supervise.open_regular(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    if isinstance(opened, str):
        log.warning("log %s %s; its output is dropped", log_path, opened)
        return
    with open(opened, "ab") as f:
        f.write(data)
