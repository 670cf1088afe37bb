"""``danlu metrics JOB``: the training metrics a job reported (``danlu.train``'s records or
any ``POST /jobs/{id}/metrics``), the last ones (``--all``: every one, read page by page)
as a table, or followed as they come. The records a restarted run went back over (it
resumed from an earlier checkpoint and reported their steps again) are left out, as the
API leaves them out, unless ``--superseded``, which shows them too with the attempt that
reported each."""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from danlu.cli.fitted_table import print_whole
from danlu.cli.follow import PAGE, GapCursor, content, read_pages
from danlu.cli.jobs import connect, console, err, fail, fail_on, print_json, report
from danlu.cli.markup import as_text
from danlu.cli.options import (
    HomeOpt,
    JobArg,
    JsonOpt,
    TokenOpt,
    UrlOpt,
    empty_error,
    given_options,
    int_option,
)
from danlu.cli.output import stderr_written
from danlu.cli.reply_fields import JOB_STATE, TIME, checked_metrics, needed
from danlu.cli.sweep_hint import sweep_hint
from danlu.client import Client, NotFoundError
from danlu.client.rest import read_across_restart
from danlu.core.errors import DanluError
from danlu.core.state import JobState
from danlu.core.values import visible

DEFAULT_COLUMNS = 8
"""Metric columns shown when ``--keys`` names none: the first reported."""
FOLLOW_SECONDS = 2.0
"""Seconds between two reads while following."""
_OWN = ("step", "time")
CHECKPOINT = "checkpoint_step"
"""The field of a record saying a checkpoint was committed at that step (``danlu.train``'s
record of a save: ``step``, ``time`` and this alone). Not a metric: the table gives it a
``checkpoint`` column of its own, shown where a record holds one, whatever ``--keys``."""
RUN_FIELDS = ("attempt", "rollback", "superseded")
"""The fields the API adds to a record read with ``superseded=true`` or by cursor: the
attempt whose run reported it, its rollback generation within that attempt (only above 0:
reported after an in-process rollback to a checkpoint) and whether a later attempt or
rollback went back over it."""


def metric_keys(records: Sequence[dict[str, Any]], most: int = DEFAULT_COLUMNS) -> list[str]:
    """The metric names of ``records`` holding numbers, in the order first reported, at most
    ``most`` of them; :data:`CHECKPOINT` is none."""
    keys: list[str] = []
    for record in records:
        for key, value in record.items():
            if key in _OWN or key == CHECKPOINT or key in keys:
                continue
            if isinstance(value, int | float) and not isinstance(value, bool):
                keys.append(key)
    return keys[:most]


def cell(value: Any) -> str:
    """A metric value for a table: 4 significant digits for numbers, ``-`` for none."""
    if value is None:
        return "-"
    if isinstance(value, bool) or not isinstance(value, int | float):
        return str(value)
    if isinstance(value, int) or (math.isfinite(value) and value.is_integer() and abs(value) < 1e9):
        return str(int(value))
    return f"{value:.4g}"


def _clock(seconds: Any) -> str:
    """A record's time as a time of day; ``-`` for none or one no clock can show (a time
    in nanoseconds stored before the server refused them, NaN, not a number)."""
    if not seconds or isinstance(seconds, bool) or not isinstance(seconds, int | float):
        return "-"
    try:
        return time.strftime("%H:%M:%S", time.localtime(seconds))
    except (OverflowError, OSError, ValueError):
        return "-"


def without_run_fields(record: dict[str, Any]) -> dict[str, Any]:
    """``record`` without :data:`RUN_FIELDS`: its step, time and metrics."""
    return {k: v for k, v in record.items() if k not in RUN_FIELDS}


def picked(record: dict[str, Any], keys: Sequence[str], runs: bool = False) -> dict[str, Any]:
    """``record`` with only its step, time, with ``runs`` its :data:`RUN_FIELDS`, and the
    metrics ``keys`` it holds (``--json --keys loss``: as the table shows only those, the
    JSON holds only them; a metric the record lacks stays out, as the API leaves it out)."""
    kept = {*_OWN, *keys, *(RUN_FIELDS if runs else ())}
    return {k: v for k, v in record.items() if k in kept}


def table(records: Sequence[dict[str, Any]], keys: Sequence[str], runs: bool = False) -> Table:
    """``records`` as a table: step, time of day, with ``runs`` the attempt that reported
    each and whether it is superseded (``yes``/``no``), ``keys``, and where a record holds
    one (and ``keys`` leave it out), the :data:`CHECKPOINT` it says; every cell is text,
    never markup (a string metric may hold ``[/val]``), its control characters written as
    escapes (:func:`~danlu.core.metric_record.visible`: a name stored before the API
    refused them, a string value, must not act on the terminal or split a row)."""
    out = Table()
    out.add_column("step", justify="right")
    out.add_column("time")
    if runs:
        out.add_column("attempt", justify="right")
        out.add_column("superseded")
    for key in keys:
        out.add_column(escape(visible(key)), justify="right")
    checkpoints = CHECKPOINT not in keys and any(CHECKPOINT in record for record in records)
    if checkpoints:  # a save's record: its own column, not a row of "-"
        out.add_column("checkpoint", justify="right")
    for record in records:
        cells = [escape(str(record.get("step"))), _clock(record.get("time"))]
        if runs:
            cells += [_attempt(record), "yes" if record.get("superseded") else "no"]
        cells += [escape(visible(cell(record.get(key)))) for key in keys]
        if checkpoints:
            cells.append(escape(visible(cell(record.get(CHECKPOINT)))))
        out.add_row(*cells)
    return out


NAMED_IN_NOTE = 8
"""The most of the records' metric names a :func:`keys_unreported_note` names (then a
count of the others)."""


def keys_unreported_note(
    records: Sequence[dict[str, Any]], keys: Sequence[str], runs: bool = False
) -> str | None:
    """A ``note:`` line (markup) when some of ``keys`` (``--keys``) are in none of the
    ``records`` shown, a misspelt name (``--keys los``) whose column would be all ``-``
    (or, followed, missing from every line) without a word: it names those keys and the
    metrics the records do hold (with ``runs``, the records hold :data:`RUN_FIELDS`,
    which are none). ``None`` when every key is in some record, or there are no records
    (the command says that itself)."""
    if not records:
        return None
    held: dict[str, None] = {}
    for record in records:
        for key in record:
            if key not in _OWN and not (runs and key in RUN_FIELDS):
                held.setdefault(key)
    missing = [key for key in keys if key not in held]
    if not missing:
        return None
    named = ", ".join(as_text(key) for key in missing)
    if not held:
        return f"note: --keys: no record shown holds {named}, nor any other metric"
    fields = list(held)
    listed = ", ".join(as_text(key) for key in fields[:NAMED_IN_NOTE])
    more = f" and {len(fields) - NAMED_IN_NOTE} more" if len(fields) > NAMED_IN_NOTE else ""
    return f"note: --keys: no record shown holds {named}; they hold {listed}{more}"


def _note_unreported(
    records: Sequence[dict[str, Any]], keys: Sequence[str], runs: bool = False
) -> None:
    """Print :func:`keys_unreported_note` on stderr, when there is one (a stderr that
    cannot be written, ``2>/dev/full``, loses the note, not the table)."""
    note = keys_unreported_note(records, keys, runs)
    if note is not None:
        with stderr_written():
            err.print(note, highlight=False, soft_wrap=True)


def _attempt(record: dict[str, Any]) -> str:
    """The attempt that reported ``record``, with its rollback generation when above 0:
    ``2`` or ``2 rollback 1`` (a record of the replay after an in-process rollback)."""
    rollback = record.get("rollback")
    shown = cell(record.get("attempt"))
    if rollback:
        shown += f" rollback {rollback}"
    return shown


def line(record: dict[str, Any], keys: Sequence[str], runs: bool = False) -> str:
    """One record as a line: ``step 120  12:00:01  loss 0.5312  lr 0.001``, with ``runs``
    ``step 120  12:00:01  attempt 2  loss 0.5312`` (``attempt 1  superseded`` for one a
    later attempt went back over), ending ``checkpoint_step 120`` where the record says a
    checkpoint (:data:`CHECKPOINT`); control characters in names and values written as
    escapes, as in :func:`table`."""
    parts = [f"step {record.get('step')}", _clock(record.get("time"))]
    if runs:
        parts.append(f"attempt {_attempt(record)}")
        parts += ["superseded"] if record.get("superseded") else []
    parts += [f"{visible(key)} {visible(cell(record[key]))}" for key in keys if key in record]
    if CHECKPOINT in record and CHECKPOINT not in keys:
        parts.append(f"{CHECKPOINT} {visible(cell(record[CHECKPOINT]))}")
    return "  ".join(parts)


def _unchanging(record: dict[str, Any]) -> str:
    """A followed record's :func:`~danlu.cli.follow.content` without ``superseded``, which
    a later attempt changes between two reads of it (it is printed once all the same)."""
    return content({k: v for k, v in record.items() if k != "superseded"})


def follow(
    client: Client,
    job: str,
    records: list[dict[str, Any]],
    keys: list[str],
    cursor: int,
    runs: bool = False,
) -> None:
    """Print ``records``, then every record the job reports after ``cursor`` (the
    ``X-Danlu-Metrics-Cursor`` of the read that found them) as it comes, once each, in the
    order they came, whatever their step (an eval at a step already shown, a restart from an
    earlier checkpoint), until the job has finished; ``keys``: the metrics shown (none: each
    record's own, up to :data:`DEFAULT_COLUMNS`); ``runs``: each line says the attempt that
    reported the record and whether it is superseded (as the API says when it is read).
    Each record is one line however narrow the output (a pipe: ``danlu metrics -f JOB |
    grep``). A record that commits after a later one
    (:class:`~danlu.cli.follow.GapCursor`) is printed too, once: records carry no id, so
    those read again are told apart by their content."""
    # time.sleep and time.monotonic through this module's ``time``: tests replace it
    gaps = GapCursor(cursor, clock=time.monotonic)
    while True:
        problems: list[str] = []
        for record in checked_metrics(records, problems):
            own = without_run_fields(record)
            text = escape(line(record if runs else own, keys or metric_keys([own]), runs))
            console.print(text, highlight=False, soft_wrap=True)
        report(problems)  # and goes on following
        # a control-plane restart is waited out (read_across_restart), as logs -f does
        found_job = read_across_restart(client, lambda: client.get_job(job))
        state = needed(found_job, "state", JOB_STATE, f"job {job}", "whether it ended is unknown")
        finished = JobState(state).terminal
        if not finished:
            time.sleep(FOLLOW_SECONDS)
        found, cursor = read_pages(
            lambda after: read_across_restart(
                client, lambda: client.metrics_page(job, after_id=after, limit=PAGE)
            ),
            gaps.after(),
        )
        records = gaps.fresh(found, cursor, _unchanging)
        if finished and not records:
            return


def refuse_purged(client: Client, job: str) -> None:
    """Fail (exit 2, as ``danlu logs`` does) when the retention deleted the job's metric
    records (its ``purged_at``): the API lists none then, as for a job that reported
    none yet."""
    found = client.get_job(job)
    if found.get("purged_at") is None:
        return
    purged_at = needed(found, "purged_at", TIME, f"job {job}", "whether it has metrics is unknown")
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(purged_at))
    raise fail(
        f"job {found.get('id')}: its metric records were deleted by the retention at {when} "
        "(DANLU_RETENTION_DAYS)"
    )


def metrics(
    ctx: typer.Context,
    job: JobArg,
    tail: Annotated[
        int,
        int_option("--tail", "-n", help="The last N records.", example="20", low=1, high=10_000),
    ] = 20,
    keys: Annotated[
        str | None,
        typer.Option(
            "--keys",
            help="Metrics to show, comma-separated (default: the first 8); with --json, each "
            "record holds only these (and its step and time).",
        ),
    ] = None,
    follow_on: Annotated[
        bool, typer.Option("--follow", "-f", help="Then print new records until the job ends.")
    ] = False,
    superseded: Annotated[
        bool,
        typer.Option(
            "--superseded",
            help="Also the records a restarted run went back over (hidden by default), "
            "with the attempt that reported each.",
        ),
    ] = False,
    every: Annotated[
        bool,
        typer.Option(
            "--all",
            help="Every record, from the first step (read page by page), not only the last --tail.",
        ),
    ] = False,
    json_out: JsonOpt = False,
    home: HomeOpt = None,
    url: UrlOpt = None,
    token: TokenOpt = None,
) -> None:
    """A job's training metrics: the last records (step, time, loss, ...) as a table; the
    records a restarted run went back over left out, unless --superseded."""
    if follow_on and json_out:
        raise fail(
            "--follow and --json cannot be combined: --json prints them once; leave out one of them"
        )
    if every and "tail" in given_options(ctx):
        raise fail("--tail: --all shows every record; give one of --all and --tail, not both")
    if every and follow_on:
        raise fail(
            "--all and --follow cannot be combined: --follow shows the last --tail records, "
            "then the new ones; leave out one of them"
        )
    chosen = [k.strip() for k in keys.split(",") if k.strip()] if keys is not None else []
    if keys is not None and not chosen:  # --keys "$KEYS" unset showed the first 8, no word
        raise fail(
            empty_error(
                "--keys",
                "give metric names, comma-separated (e.g. loss,lr), or leave --keys out for "
                f"the first {DEFAULT_COLUMNS}",
            )
        )
    with connect(home, url, token) as client:
        try:
            if follow_on:
                records, cursor = client.metrics_page(
                    job, limit=tail, tail=True, superseded=superseded
                )
                if not records:
                    refuse_purged(client, job)
                _note_unreported(checked_metrics(records, []), chosen, superseded)
                follow(client, job, records, chosen, cursor, runs=superseded)
                return
            if every:  # page by page, however many records a step holds
                records = list(client.iter_metrics(job, superseded=superseded))
            else:
                records = client.metrics(job, limit=tail, tail=True, superseded=superseded)
            if not records:
                refuse_purged(client, job)
            if json_out:
                print_json([picked(r, chosen, superseded) for r in records] if chosen else records)
                return
        except NotFoundError as exc:  # an array's id: its tasks' metrics are per task
            raise fail(f"{exc}{sweep_hint(client, job)}") from None
        except DanluError as exc:
            raise fail(exc) from None
        except KeyboardInterrupt:
            raise typer.Exit(code=130) from None
    if not records:
        console.print(f"job {as_text(job)} has reported no metrics yet", highlight=False)
        return
    problems: list[str] = []
    records = checked_metrics(records, problems)
    shown = chosen or metric_keys(
        [without_run_fields(r) for r in records] if superseded else records
    )
    print_whole(console, table(records, shown, runs=superseded))  # a pipe: no cell cut
    _note_unreported(records, chosen, superseded)
    fail_on(problems)


def register(app: typer.Typer) -> None:
    """Add ``metrics``."""
    app.command(name="metrics")(metrics)
