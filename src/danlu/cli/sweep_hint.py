"""What follows a job command's "job not found" when the id given is a sweep's or a job
array's: ``danlu submit --array`` prints an array id, which ``danlu wait`` and ``--after``
take, so ``danlu cancel ARRAY`` or ``danlu show ARRAY`` is a natural next step; the job
commands then name the ``danlu sweep`` command that takes it."""

from __future__ import annotations

import re
import shlex

from danlu.client import Client
from danlu.core.errors import DanluError

JOB_ID_TEXT = re.compile(r"[0-9a-fA-F]+")
"""What a job id, or the prefix of one, is made of: hex digits."""


def sweep_hint(client: Client, job: str, action: str = "show") -> str:
    """``; 81c1 is the job array 81c12f80846f: `danlu sweep cancel 81c12f80846f``` when
    ``job`` (text a job command found no job by) is the id, or a prefix of it, of a sweep or
    job array the caller sees; ``action`` is the ``danlu sweep`` command that does what the
    job command was asked (``show``, ``cancel``). Empty for text no id could be, and when
    the server finds no such sweep or cannot be asked (the job's not-found error stands
    alone, as before)."""
    if not JOB_ID_TEXT.fullmatch(job):
        return ""
    try:
        sweep = client.sweep(job)
    except DanluError:
        return ""
    sweep_id = sweep.get("id")
    if not isinstance(sweep_id, str) or not JOB_ID_TEXT.fullmatch(sweep_id):
        return ""
    kind = "job array" if sweep.get("array") is True else "sweep"
    named = (
        f"it is a {kind}" if job.lower() == sweep_id.lower() else f"{job} is the {kind} {sweep_id}"
    )
    return f"; {named}: `danlu sweep {action} {shlex.quote(sweep_id)}`"
