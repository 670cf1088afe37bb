"""``danlu estimate``: GPU memory of a training step, predicted before launch."""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, Annotated, Any

import typer

from danlu.cli.markup import as_text, visible_lines
from danlu.cli.markup import console as cli_console
from danlu.cli.options import given_options, int_option, refuse_empty
from danlu.cli.output import stderr_written, stdout_written
from danlu.core.errors import DanluError, SpecError
from danlu.core.units import format_bytes
from danlu.estimate import report as report_module

if TYPE_CHECKING:
    from danlu.estimate.report import MemoryReport

DEFAULT_FIT_POINTS = ",".join(map(str, report_module.DEFAULT_FIT_POINTS))
"""``--fit-points`` when not given."""
LONE_SAMPLE_FIT_POINTS = ",".join(map(str, report_module.LONE_SAMPLE_FIT_POINTS))
"""The fit points traced in place of the default's when the model cannot train on a batch of
one sample (batch normalisation in training): the default's next points."""
LONE_SAMPLE_ROW = report_module.LONE_SAMPLE_ROW
"""The ``--sweep`` row of batch 1 for such a model: the fit from 2 on would answer it."""
FLAG_NAMES = dict(report_module.PARAMETER_FLAGS)
"""The flag of each argument of :func:`danlu.estimate.estimate_memory`: an error it raises
names the flag here."""


def _ints(value: str, flag: str) -> list[int]:
    """The batch sizes of a comma-separated ``flag`` (each within ``1..MAX_BATCH``)."""
    try:
        out = [int(v) for v in value.replace(" ", "").split(",") if v]
    except ValueError:
        raise SpecError(
            flag, f"{value!r} is not a comma-separated list of batch sizes, e.g. 1,2,4,8"
        ) from None
    if not out:
        raise SpecError(flag, f"batch sizes must be integers >= 1, got {value!r}")
    return [report_module.batch_size_within(v, flag) for v in out]


def run_estimate(
    model_ref: str,
    *,
    batch_size: int | None,
    precision: str,
    gpu_name: str,
    optimizer: str,
    checkpointing: bool,
    accumulation: int,
    sweep: str | None,
    max_batch: bool,
    gpu_memory: str | None,
    margin: str | None,
    fit_points: str | None,
    gpu_table: str | None,
    target: str,
    as_json: bool,
    data_parallel: bool = False,
) -> dict[str, Any]:
    """Do the work of the command; returns the JSON object (also printed).

    The estimate is :func:`danlu.estimate.estimate_memory`'s (the command's flags are its
    arguments; ``margin`` and ``fit_points`` None: not given), printed as a table or, with
    ``as_json``, as :meth:`~danlu.estimate.report.MemoryReport.to_json`. Notes go to stderr
    as they arise, one line each."""
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    err = cli_console(stderr=True)

    def note(text: str) -> None:
        with stderr_written():  # 2>/dev/full: the estimate goes on without its note
            err.print(f"note: {as_text(text)}", highlight=False, soft_wrap=True)

    with Progress(
        TextColumn("tracing {task.description}"),
        BarColumn(),
        TimeElapsedColumn(),
        console=err,
        transient=True,
        disable=not err.is_terminal,
    ) as bar:
        task = bar.add_task(as_text(model_ref), total=None)

        def progress(done: int, total: int, b: int) -> None:
            what = f"{model_ref} (b={b}; {done}/{total} batch sizes)"
            bar.update(task, completed=done, total=total, description=as_text(what))

        try:
            report = report_module.estimate_memory(
                model_ref,
                batch_size,
                precision=precision,
                optimizer=optimizer,
                gpu=gpu_name,
                checkpointing=checkpointing,
                accumulation=accumulation,
                data_parallel=data_parallel,
                gpu_memory=gpu_memory,
                sweep=_ints(sweep, "--sweep") if sweep is not None else None,
                max_batch=max_batch,
                margin=margin,
                fit_points=_ints(fit_points, "--fit-points") if fit_points is not None else None,
                gpu_table=gpu_table,
                target=target,
                progress=progress,
                on_note=note,
            )
        except SpecError as exc:  # named by the argument: the command names its flag
            raise report_module.named_for(exc, FLAG_NAMES) from None
    result = report.to_json()
    # written as the other commands write: a full disk or a reader gone (| head) is an
    # error line or exit 141, not a traceback
    with stdout_written():
        if as_json:
            sys.stdout.write(json.dumps(result) + "\n")
            sys.stdout.flush()
        else:
            _print_report(report)
    return result


def _print_report(report: MemoryReport) -> None:
    """``report`` as the command's tables and lines (warnings on stderr)."""
    from rich.table import Table

    err = cli_console(stderr=True)
    out = cli_console()
    main, gpu = report.estimate, report.gpu
    limit_label = f"{format_bytes(report.limit_bytes)} ({report.limit_source})"
    # names (the model's reference, a --gpu-table's GPU) are text, neither Rich markup nor
    # control characters
    title = as_text(
        f"{report.model_ref}  b={main.batch_size}  {report.precision}  {report.optimizer}  "
        f"on {gpu.name}"
    )
    table = Table(title=title, show_header=True)
    table.add_column("")
    table.add_column("bytes", justify="right")
    table.add_column("", justify="right")
    for key, value in main.breakdown.items():
        label = f"  {as_text(key)}"
        if key in main.breakdown_notes:  # less than its own size: said below the table
            label += " (not live at the peak)" if value == 0 else " (part live at the peak)"
        table.add_row(label, str(value), format_bytes(value))
    for label, value in (
        ("peak logical (live tensors)", main.peak_logical_bytes),
        ("peak allocated (allocator)", main.peak_allocated_bytes),
        ("peak reserved (allocator)", main.peak_reserved_bytes),
        ("CUDA context", main.context_bytes),
        ("peak on the GPU", main.peak_device_bytes),
        (f"{as_text(gpu.name)} capacity", gpu.capacity_bytes),
        # (a --gpu-memory above the capacity was capped: the limit is the capacity)
        *(
            (("limit (--gpu-memory)", report.limit_bytes),)
            if report.limit_source == "--gpu-memory"
            else ()
        ),
    ):
        table.add_row(label, str(value), format_bytes(value))
    out.print(table)
    for key, words in main.breakdown_notes.items():
        out.print(f"{as_text(key)}: {as_text(words)}", highlight=False, soft_wrap=True)
    out.print(
        "fits" if main.fits else "[red]does NOT fit[/red]",
        f"within {limit_label} on {as_text(gpu.name)}",
    )
    out.print(as_text(report.submit_in_words()), highlight=False, soft_wrap=True)
    out.print(f"model family (for GPU sharing): {as_text(main.family or 'none recognised')}")
    for w in main.warnings:
        with stderr_written():  # (a full stderr is no failure to write the output)
            err.print(f"[yellow]warning:[/yellow] {as_text(w)}", highlight=False, soft_wrap=True)
    if report.sweep:
        st = Table(
            title="M(b) (fitted from b = "
            + ",".join(map(str, report.traced_batch_sizes))
            + f"; verdicts within {limit_label})"
        )
        for col in ("batch", "logical", "reserved", "on the GPU", ""):
            st.add_column(col, justify="right")
        for r in report.sweep:
            if r.error is not None:
                st.add_row(str(r.batch_size), "-", "-", "-", f"refused: {as_text(r.error)}")
            else:
                st.add_row(
                    str(r.batch_size),
                    format_bytes(r.peak_logical_bytes or 0),
                    format_bytes(r.peak_reserved_bytes or 0),
                    format_bytes(r.peak_device_bytes or 0),
                    "fits" if r.fits else "OOM",
                )
        out.print(st)
    if report.max_batch is not None:
        answer = report.max_batch
        out.print(
            f"largest safe batch within {limit_label} - margin "
            f"{format_bytes(answer.margin_bytes)}: {as_text(answer.in_words())}",
            highlight=False,
            soft_wrap=True,
        )


def refuse_empty_flags(gpu_memory: str | None, gpu_table: str | None) -> None:
    """Refuse an empty ``--gpu-memory`` or ``--gpu-table`` (a script's unset variable,
    ``--gpu-memory "$SHARE"``), naming the flag: an empty ``--gpu-memory`` was read as not
    given, so every verdict was judged against the whole GPU's capacity ("fits" for a job
    given a share of one), and ``--gpu-table ""`` tried to read the current directory."""
    refuse_empty(
        "--gpu-memory",
        gpu_memory,
        "give a memory limit per GPU such as 20GiB, or leave --gpu-memory out for the GPU's "
        "capacity",
    )
    refuse_empty(
        "--gpu-table",
        gpu_table,
        "give a JSON file of GPUs, or leave --gpu-table out for the built-in table",
    )


def register(app: typer.Typer) -> None:
    """Add the ``estimate`` command to ``app``."""

    @app.command("estimate")
    def estimate(
        ctx: typer.Context,
        model_ref: Annotated[
            str,
            typer.Argument(
                help="package.module:factory returning "
                "(model, make_batch, loss_fn), e.g. danlu.estimate.zoo:gpt2_124m"
            ),
        ],
        batch_size: Annotated[
            int | None,
            int_option(
                "--batch-size", "-b", help="per-GPU (micro-)batch size to trace", example="8"
            ),
        ] = None,
        precision: Annotated[str, typer.Option(help="fp32, fp16 or bf16 (autocast)")] = "fp32",
        gpu: Annotated[
            str,
            typer.Option(
                help="GPU type: h100, h100-nvl, h200, a100-80gb, a100-40gb, "
                "v100-32gb, v100-16gb, t4, a10, l4, rtx4090"
            ),
        ] = "h100",
        optimizer: Annotated[
            str, typer.Option(help="adamw, adam, sgd, sgd-momentum, ... or any torch.optim class")
        ] = "adamw",
        checkpointing: Annotated[
            bool, typer.Option("--checkpointing", help="activation checkpointing on")
        ] = False,
        accumulation: Annotated[
            int,
            int_option("--accumulation", help="gradient accumulation steps", example="4"),
        ] = 1,
        sweep: Annotated[
            str | None,
            typer.Option(help="batch sizes to predict from the fitted M(b), e.g. 1,2,4,8,16"),
        ] = None,
        max_batch: Annotated[
            bool, typer.Option("--max-batch", help="print the largest batch that fits")
        ] = False,
        gpu_memory: Annotated[
            str | None,
            typer.Option(
                help="memory limit per GPU that the verdicts, --sweep and --max-batch judge "
                "against (default: the GPU's capacity), e.g. 80GiB"
            ),
        ] = None,
        margin: Annotated[
            str,
            typer.Option(help="safety margin for --max-batch: a size (2GiB) or a share (5%)"),
        ] = "5%",
        fit_points: Annotated[
            str,
            typer.Option(
                help="batch sizes traced to fit M(b) (with --batch-size); the default is "
                f"{LONE_SAMPLE_FIT_POINTS} for a model that cannot train on one sample "
                "(batch normalisation)"
            ),
        ] = DEFAULT_FIT_POINTS,
        gpu_table: Annotated[
            str | None, typer.Option(help="JSON file recalibrating the GPU table")
        ] = None,
        target: Annotated[
            str,
            typer.Option(
                help="cuda (predict for a GPU) or cpu (imitate this machine's CPU kernels)"
            ),
        ] = "cuda",
        as_json: Annotated[bool, typer.Option("--json", help="print one JSON object")] = False,
        data_parallel: Annotated[
            bool,
            typer.Option(
                "--data-parallel",
                help="the job runs under DDP on more than one GPU (as danlu.train does): "
                "count DDP's gradient buckets, one more gradient-sized buffer",
            ),
        ] = False,
    ) -> None:
        """Predict the peak GPU memory of one training step (and M(b), the largest batch)."""
        try:
            given = given_options(ctx)
            refuse_empty_flags(gpu_memory, gpu_table)
            run_estimate(
                model_ref,
                batch_size=batch_size,
                precision=precision,
                gpu_name=gpu,
                optimizer=optimizer,
                checkpointing=checkpointing,
                accumulation=accumulation,
                sweep=sweep,
                max_batch=max_batch,
                gpu_memory=gpu_memory,
                margin=margin if "margin" in given else None,
                fit_points=fit_points if "fit_points" in given else None,
                gpu_table=gpu_table,
                target=target,
                as_json=as_json,
                data_parallel=data_parallel,
            )
        except DanluError as exc:
            with stderr_written():
                typer.echo(f"error: {visible_lines(exc)}", err=True)
            raise typer.Exit(2) from None
