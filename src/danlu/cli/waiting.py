"""``danlu wait``, and the waiting that ``danlu submit --wait`` and ``danlu rerun --wait`` do
after they have made their job: jobs, sweeps and job arrays waited for until they end, each
end printed (or, with ``--json``, the Jobs at the end), and the exit status ``danlu wait``
documents. A sweep or job array is judged from the sweep alone, one request a poll
(:func:`~danlu.client.waits.wait_all`), however many tasks it has."""

from __future__ import annotations

import math
from typing import Annotated, Any

import typer

from danlu.cli import jobs as common
from danlu.cli.interrupt import INTERRUPTED as INTERRUPTED  # re-exported: job_submit, job_views
from danlu.cli.job_table import told_end_reason
from danlu.cli.markup import after_state, as_text
from danlu.cli.options import HomeOpt, JsonOpt, TokenOpt, UrlOpt, error_line, float_option
from danlu.client import Client, JobDict, WaitTimeout
from danlu.client.waits import Ended, resolve, wait_all
from danlu.core.errors import DanluError, SpecError
from danlu.core.units import parse_duration

NOT_SUCCEEDED = 1
"""The exit status once a job waited for (or followed, ``danlu logs -f``) ended FAILED or
CANCELLED."""
WAIT_TIMEOUT_EXIT = 124
"""``danlu wait``'s exit status when ``--timeout`` passes first (as timeout(1)'s)."""


def parse_timeout(text: str | None, flag: str = "--timeout") -> float | None:
    """``flag``'s duration in seconds (None when not given): finite and 0 or more."""
    if text is None:
        return None
    seconds = parse_duration(text, flag)
    if not (math.isfinite(seconds) and seconds >= 0):
        raise SpecError(flag, f"{text!r}: give a finite duration of 0 or more, e.g. 600 or 30m")
    return seconds


def sweep_failed(sweep: dict[str, Any]) -> str | None:
    """Why an ended sweep or job array did not succeed as a whole (it did not end DONE, or
    not every one of its trials was submitted), or None when it did."""
    state, submitted, total = sweep.get("state"), sweep.get("submitted"), sweep.get("total")
    short = isinstance(submitted, int) and isinstance(total, int) and submitted < total
    if state == "DONE" and not short:
        return None
    kind = "array" if sweep.get("array") else "sweep"
    reason = after_state(state, sweep.get("reason"))
    return f"{kind} {sweep.get('id')} {state}{reason} ({submitted} of {total} submitted)"


def report_sweeps(failed: list[str], code: int) -> int:
    """Print the sweeps in ``failed`` on stderr; ``code``, made 1 when it was 0 and one
    of them failed."""
    for line in failed:  # a sweep's reason is server text: shown, never acted on
        error_line(line)
    return NOT_SUCCEEDED if failed and code == 0 else code


def wait(
    jobs: Annotated[
        list[str], typer.Argument(help="Job ids (or unique prefixes), or sweep / array ids.")
    ],
    timeout: Annotated[
        str | None,
        typer.Option("--timeout", help="Give up after this long: 600, 30m, 02:00:00."),
    ] = None,
    poll: Annotated[
        float,
        float_option("--poll", help="Seconds between two looks.", example="2", low=0.1),
    ] = 2.0,
    json_out: JsonOpt = False,
    home: HomeOpt = None,
    url: UrlOpt = None,
    token: TokenOpt = None,
) -> None:
    """Wait until the jobs finish, printing each as it does (a sweep or job array: until it
    has ended, then its trials). Exit status: 0 when every one SUCCEEDED, 1 when one FAILED
    or was CANCELLED (or a sweep or array ended FAILED or CANCELLED, or before all its
    tasks were submitted; a trial of a DONE sweep that its early-stopping rule cancelled
    counts as succeeded), 124 when --timeout passed first, 2 for an error (an unknown job)."""
    try:
        seconds = parse_timeout(timeout)
        if not math.isfinite(poll):
            raise SpecError("--poll", f"{poll}: give a finite number of seconds, e.g. 2")
    except DanluError as exc:
        raise common.fail(exc) from None
    with common.connect(home, url, token) as client:
        code = wait_jobs(client, jobs, seconds, poll, json_out)
    raise typer.Exit(code)


def wait_jobs(
    client: Client, jobs: list[str], timeout: float | None, poll: float, json_out: bool
) -> int:
    """Wait for ``jobs`` (ids or unique prefixes of jobs, sweeps or job arrays) until each
    has ended or ``timeout`` seconds passed; print each job's end as it is seen (a sweep's
    or array's trials' once it has ended), or with ``json_out`` the Jobs at the end (at a
    timeout those that had ended), then why each sweep or array that did not succeed as a
    whole did not (:func:`sweep_failed`); returns the exit status :func:`wait` documents."""

    def ended(end: Ended) -> None:
        if not json_out:
            meant = stopped_early(end.sweep) if end.sweep is not None else set()
            for job in end.jobs:
                print_end(job, stopped_early=job.get("id") in meant)

    try:
        waited = list(dict.fromkeys(resolve(client, key) for key in dict.fromkeys(jobs)))
        ends = wait_all(client, waited, timeout=timeout, poll=poll, on_end=ended)
    except WaitTimeout as exc:
        if json_out:
            common.print_json(exc.finished)
        error_line(exc)
        return WAIT_TIMEOUT_EXIT
    except DanluError as exc:
        raise common.fail(exc) from None
    except KeyboardInterrupt:
        raise typer.Exit(code=INTERRUPTED) from None
    done = [job for end in ends for job in end.jobs]
    if json_out:
        common.print_json(done)
    failed = [why for end in ends if end.sweep is not None and (why := sweep_failed(end.sweep))]
    meant = {job_id for end in ends if end.sweep is not None for job_id in stopped_early(end.sweep)}
    ok = all(job.get("state") == "SUCCEEDED" or job.get("id") in meant for job in done)
    code = 0 if ok else NOT_SUCCEEDED
    return report_sweeps(failed, code)


def stopped_early(sweep: dict[str, Any]) -> set[str]:
    """The jobs of the trials of ``sweep`` (a DONE one) that its early-stopping rule
    cancelled: they ended as the sweep meant them to, and count as succeeded (as for a job
    that waits on the sweep with ``--after``); none for a sweep that did not end DONE."""
    if sweep.get("state") != "DONE":
        return set()
    trials = sweep.get("trials") or []
    return {str(t.get("job_id")) for t in trials if isinstance(t, dict) and t.get("stopped_early")}


def end_status(job: JobDict) -> str:
    """What follows an ended job's state where the cli prints its end (as Rich markup): a
    FAILED job's `` (exit 1)``, then its ``end_reason`` where that says more than the code
    (:func:`~danlu.cli.job_table.told_end_reason`): ``FAILED (exit 1): out of memory (exit code
    1); out of restarts (0 of 0)``, ``CANCELLED: time limit reached: ran 2h of 2h``; a
    reason that begins with the state's word goes on from the state (``CANCELLED by
    alice``, :func:`~danlu.cli.markup.after_state`)."""
    code = job.get("exit_code")
    status = f" (exit {as_text(code)})" if job.get("state") == "FAILED" and code is not None else ""
    more = told_end_reason(job)
    if more is None:
        return status
    # the state once: "CANCELLED by alice", not "CANCELLED: cancelled by alice"
    return f"{status}: {as_text(more)}" if status else as_text(after_state(job.get("state"), more))


def print_end(job: JobDict, *, stopped_early: bool = False) -> None:
    """A job's end as ``danlu wait`` prints it: ``job ID (NAME): FAILED (exit 3)`` and the
    reason where it says more (:func:`end_status`), or ``CANCELLED (stopped early)`` for a
    trial its sweep's early-stopping rule stopped."""
    status = " (stopped early)" if stopped_early else end_status(job)
    # the id, name and state are server text: neither Rich markup nor control characters
    # (a name stored with an ESC sequence or a line break is shown as \x1b, \n)
    ident, name = as_text(job.get("id")), as_text(job.get("name"))
    common.console.print(
        f"job [bold]{ident}[/bold] ({name}): {as_text(job.get('state'))}{status}",
        highlight=False,
    )
