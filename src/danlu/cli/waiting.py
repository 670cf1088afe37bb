"""``danlu wait``, and the waiting that ``danlu submit --wait`` and ``danlu rerun --wait`` do
after they have made their job: jobs, sweeps and job arrays waited for until they end, each
end printed (or, with ``--json``, the Jobs at the end), and the exit status ``danlu wait``
documents."""

from __future__ import annotations

import math
import time
from typing import Annotated, Any

import typer
from rich.markup import escape

from danlu.cli import jobs as common
from danlu.cli.options import HomeOpt, JsonOpt, TokenOpt, UrlOpt
from danlu.client import Client, NotFoundError, WaitTimeout
from danlu.core.errors import DanluError, SpecError
from danlu.core.units import parse_duration

INTERRUPTED = 130
"""The exit status after Ctrl-C, as a shell gives 128 + SIGINT."""
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
    reason = f": {sweep['reason']}" if sweep.get("reason") else ""
    return f"{kind} {sweep.get('id')} {state}{reason} ({submitted} of {total} submitted)"


def report_sweeps(failed: list[str], code: int) -> int:
    """Print the sweeps in ``failed`` on stderr; ``code``, made 1 when it was 0 and one
    of them failed."""
    for line in failed:
        common.err.print(f"[red]error:[/red] {escape(line)}", highlight=False, soft_wrap=True)
    return 1 if failed and code == 0 else code


def wait(
    jobs: Annotated[
        list[str], typer.Argument(help="Job ids (or unique prefixes), or sweep / array ids.")
    ],
    timeout: Annotated[
        str | None,
        typer.Option("--timeout", help="Give up after this long: 600, 30m, 02:00:00."),
    ] = None,
    poll: Annotated[
        float, typer.Option("--poll", min=0.1, help="Seconds between two looks.")
    ] = 2.0,
    json_out: JsonOpt = False,
    home: HomeOpt = None,
    url: UrlOpt = None,
    token: TokenOpt = None,
) -> None:
    """Wait until the jobs finish, printing each as it does (a sweep or job array: until it
    has ended, then its trials). Exit status: 0 when every one SUCCEEDED, 1 when one FAILED
    or was CANCELLED (or a sweep or array ended FAILED or CANCELLED, or before all its
    tasks were submitted), 124 when --timeout passed first, 2 for an error (an unknown job)."""
    try:
        seconds = parse_timeout(timeout)
        if not math.isfinite(poll):
            raise SpecError("--poll", f"{poll}: give a finite number of seconds, e.g. 2")
    except DanluError as exc:
        raise common.fail(exc) from None
    with common.connect(home, url, token) as client:
        try:
            ids, left, failed = with_trials(client, jobs, seconds, poll)
        except WaitTimeout as exc:
            if json_out:  # stdout stays JSON, as when plain jobs time out
                common.print_json(exc.finished)
            common.err.print(f"[red]error:[/red] {escape(str(exc))}", highlight=False)
            raise typer.Exit(WAIT_TIMEOUT_EXIT) from None
        except DanluError as exc:
            raise common.fail(exc) from None
        except KeyboardInterrupt:
            raise typer.Exit(code=INTERRUPTED) from None
        code = wait_jobs(client, ids, seconds, poll, json_out, left=left)
    raise typer.Exit(report_sweeps(failed, code))


def with_trials(
    client: Client, ids: list[str], timeout: float | None, poll: float
) -> tuple[list[str], float | None, list[str]]:
    """``ids`` with each sweep or job array among them replaced by its trials' job ids once
    it has ended (waited for here), the seconds of ``timeout`` left, and why each of those
    sweeps that did not succeed as a whole did not (:func:`sweep_failed`)."""
    start = time.monotonic()
    out: list[str] = []
    failed: list[str] = []
    for key in dict.fromkeys(ids):
        try:
            client.get_job(key)
        except NotFoundError:
            try:
                sweep = client.sweep(key)
            except NotFoundError:
                raise NotFoundError(
                    404, "NotFoundError", None, f"no job, sweep or job array {key!r}"
                ) from None
            while sweep["state"] == "RUNNING":
                spent = time.monotonic() - start
                if timeout is not None and spent >= timeout:
                    raise WaitTimeout([key], [], timeout) from None
                time.sleep(poll if timeout is None else min(poll, timeout - spent))
                sweep = client.sweep(str(sweep["id"]))
            out.extend(str(trial["job_id"]) for trial in sweep.get("trials") or ())
            why = sweep_failed(sweep)
            if why is not None:
                failed.append(why)
        else:
            out.append(key)
    left = None if timeout is None else max(0.0, timeout - (time.monotonic() - start))
    return out, left, failed


def wait_jobs(
    client: Client,
    jobs: list[str],
    timeout: float | None,
    poll: float,
    json_out: bool,
    left: float | None = None,
) -> int:
    """Wait for ``jobs`` (``left`` of the ``timeout`` seconds, when some were spent);
    print each end (or, with ``json_out``, the Jobs at the end); the exit status
    :func:`wait` documents."""

    def ended(job: dict[str, Any]) -> None:
        if json_out:
            return
        code = job.get("exit_code")
        status = f" (exit {code})" if job.get("state") == "FAILED" and code is not None else ""
        common.console.print(
            f"job [bold]{job.get('id')}[/bold] ({escape(str(job.get('name')))}): "
            f"{job.get('state')}{status}",
            highlight=False,
        )

    try:
        done = client.wait(jobs, timeout=timeout if left is None else left, poll=poll, on_end=ended)
    except WaitTimeout as exc:
        if json_out:
            common.print_json(exc.finished)
        whole = WaitTimeout(exc.unfinished, exc.finished, timeout or 0.0)
        common.err.print(f"[red]error:[/red] {escape(str(whole))}", highlight=False)
        return WAIT_TIMEOUT_EXIT
    except DanluError as exc:
        raise common.fail(exc) from None
    except KeyboardInterrupt:
        raise typer.Exit(code=INTERRUPTED) from None
    if json_out:
        common.print_json(done)
    return 0 if all(job.get("state") == "SUCCEEDED" for job in done) else 1
