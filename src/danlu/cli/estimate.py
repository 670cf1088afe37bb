"""``danlu estimate``: GPU memory of a training step, predicted before launch."""

from __future__ import annotations

import json
import math
import re
import sys
import time
from typing import TYPE_CHECKING, Annotated, Any

import typer

from danlu.cli.markup import as_text, visible_lines
from danlu.cli.markup import console as cli_console
from danlu.cli.options import given_options, int_option, refuse_empty
from danlu.cli.output import stderr_written, stdout_written
from danlu.core.errors import DanluError, SpecError, UnknownNameError
from danlu.core.spec import MAX_BATCH
from danlu.core.units import format_bytes, parse_bytes
from danlu.core.values import range_message

if TYPE_CHECKING:
    from danlu.estimate.memory import FittedMemoryModel

DEFAULT_FIT_POINTS = "1,2,4"
"""``--fit-points`` when not given."""
LONE_SAMPLE_FIT_POINTS = "2,4,8"
"""The fit points traced in place of the default's when the model cannot train on a batch of
one sample (batch normalisation in training): the default's next points."""
LONE_SAMPLE_ROW = "the model cannot train on a batch of 1 sample (batch normalisation)"
"""The ``--sweep`` row of batch 1 for such a model: the fit from 2 on would answer it."""


def _batch_size(value: int, flag: str) -> int:
    """``value`` when it is a batch size the tracer takes (``1..MAX_BATCH``, a job spec's
    limit), else a :class:`SpecError` naming ``flag`` and the limit."""
    if not 1 <= value <= MAX_BATCH:
        raise SpecError(flag, f"batch size {range_message(1, MAX_BATCH, value)}")
    return value


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
    return [_batch_size(v, flag) for v in out]


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
    margin: str,
    fit_points: str | None,
    gpu_table: str | None,
    target: str,
    as_json: bool,
    data_parallel: bool = False,
) -> dict[str, Any]:
    """Do the work of the command; returns the JSON object (also printed).

    Every verdict (the traced batch's, each ``--sweep`` row's, ``--max-batch``) is judged
    against one limit: ``--gpu-memory`` when given (the replay then models a GPU of that
    size; one above the GPU's capacity is capped there, with a note: it is a share of one
    GPU), else the GPU's capacity;
    the output says which (``limit_bytes``, ``limit_source``). M(b) is fitted from every
    traced batch size: ``--fit-points`` and ``--batch-size``. ``fit_points`` None is the
    default (:data:`DEFAULT_FIT_POINTS`); a model that cannot train on a batch of one sample
    is then traced at :data:`LONE_SAMPLE_FIT_POINTS` instead, with a note on stderr (given
    points, or ``--batch-size 1``, keep the error)."""
    from dataclasses import replace

    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
    from rich.table import Table

    from danlu.estimate.memory import (
        ExtrapolationError,
        FittedMemoryModel,
        LoneSampleError,
        StepTrace,
        TraceRequest,
        get_gpu,
        load_gpu_table,
        replay,
        trace,
    )

    err = cli_console(stderr=True)
    out = cli_console()
    gpus = load_gpu_table(gpu_table)
    try:
        gpu = get_gpu(gpu_name, gpus)
    except UnknownNameError as exc:  # the fix for a GPU the table lacks was not told
        raise SpecError(
            "--gpu",
            f"unknown GPU type {gpu_name!r}: use one of {', '.join(exc.valid)}, or describe "
            "it in a JSON file given as --gpu-table (docs/estimate-memory.md, GPU table)",
        ) from None
    sweep_sizes = _ints(sweep, "--sweep") if sweep is not None else []
    need_fit = bool(sweep_sizes) or max_batch
    points = _ints(fit_points or DEFAULT_FIT_POINTS, "--fit-points") if need_fit else []
    if batch_size is None and not need_fit:
        raise SpecError(
            "--batch-size",
            "give a batch size (e.g. --batch-size 32), or --sweep 1,2,4,8 or --max-batch",
        )
    if batch_size is not None:
        _batch_size(batch_size, "--batch-size")
    if need_fit and len(set(points)) < 2:
        raise SpecError("--fit-points", "fitting M(b) needs at least two batch sizes, e.g. 1,2,4")
    limit = parse_bytes(gpu_memory, "--gpu-memory") if gpu_memory else gpu.capacity_bytes
    if limit <= 0:
        raise SpecError("--gpu-memory", f"{gpu_memory!r} is no memory; write e.g. 80GiB")
    limit_source = "--gpu-memory" if gpu_memory else "capacity"
    decimal_note = _decimal_gpu_size_note(gpu_memory) if gpu_memory else None
    if decimal_note:
        with stderr_written():  # 2>/dev/full: the estimate goes on without its note
            err.print(f"note: {decimal_note}", highlight=False, soft_wrap=True)
    if limit > gpu.capacity_bytes:  # a share of one GPU: capped, as the server caps a share
        with stderr_written():  # 2>/dev/full: the estimate goes on without its note
            err.print(
                f"note: --gpu-memory {as_text(gpu_memory)} ({format_bytes(limit)}) is more "
                f"than the {as_text(gpu.name)}'s capacity of "
                f"{format_bytes(gpu.capacity_bytes)}: judged against the capacity (the limit "
                "is a share of one GPU; choose a larger --gpu for more)",
                highlight=False,
                soft_wrap=True,  # one line, as every note and warning: not cut at 80 columns
            )
        limit, limit_source = gpu.capacity_bytes, "capacity"
    limit_label = f"{format_bytes(limit)} ({limit_source})"
    judged = replace(gpu, capacity_bytes=limit)  # the GPU the verdicts are for
    margin_bytes = _margin_bytes(margin, limit)
    if margin_bytes >= limit:
        raise SpecError(
            "--margin",
            f"{margin!r} leaves nothing of the {limit_label} limit; write a smaller size or "
            "a share such as 5%",
        )
    sizes = sorted(set(points) | ({batch_size} if batch_size else set()))

    def traced(sizes: list[int]) -> list[StepTrace]:
        """The traces of ``sizes``, with a progress bar on a terminal."""
        req = TraceRequest(
            model_ref,
            tuple(sizes),
            precision=precision,  # type: ignore[arg-type]
            optimizer=optimizer,
            checkpointing=checkpointing,
            accumulation=accumulation,
            target=target,  # type: ignore[arg-type]
            data_parallel=data_parallel,
        )
        with Progress(
            TextColumn("tracing {task.description}"),
            BarColumn(),
            TextColumn("{task.completed}/{task.total} batch sizes"),
            TimeElapsedColumn(),
            console=err,
            transient=True,
            disable=not err.is_terminal,
        ) as bar:
            task = bar.add_task(as_text(model_ref), total=len(sizes))

            def progress(done: int, total: int, b: int) -> None:
                bar.update(task, completed=done, description=as_text(f"{model_ref} (b={b})"))

            return trace(req, progress)

    t0 = time.perf_counter()
    lone_sample = False  # the model cannot train on one sample (traced from 2 on)
    try:
        traces = traced(sizes)
    except LoneSampleError:
        # the default points start at one sample, which a model with batch normalisation
        # cannot train on: the user, who chose no points, is told and served from 2 on
        if not (need_fit and fit_points is None and batch_size != 1):
            raise
        lone_sample = True
        points = _ints(LONE_SAMPLE_FIT_POINTS, "--fit-points")
        sizes = sorted(set(points) | ({batch_size} if batch_size else set()))
        with stderr_written():  # 2>/dev/full: the estimate goes on without its note
            err.print(
                f"note: {as_text(model_ref)} cannot train on a batch of 1 sample (batch "
                f"normalisation): M(b) fitted from --fit-points {LONE_SAMPLE_FIT_POINTS} in "
                f"place of the default {DEFAULT_FIT_POINTS}",
                highlight=False,
                soft_wrap=True,
            )
        traces = traced(sizes)
    checked_alone = False  # batch 1 traced (after the fit) to check it trains

    def cannot_train_alone(b: int) -> bool:
        """Whether ``b`` is a batch of one sample that the model cannot train on (batch
        normalisation in training): known when the fit was traced from 2 on for it, else
        told by tracing batch 1 once (for ``--sweep`` and ``--max-batch`` alike). A batch
        below every traced one is the fit's figure alone: it "fitted" where the step
        fails."""
        nonlocal lone_sample, checked_alone
        if b != 1 or 1 in sizes:  # (batch 1 traced: it trains)
            return False
        if not (lone_sample or checked_alone):
            checked_alone = True
            try:
                traced([1])
            except LoneSampleError:
                lone_sample = True
        return lone_sample

    source = "--gpu-memory" if limit_source == "--gpu-memory" else None
    estimates = {t.batch_size: replay(t, judged, source) for t in traces}
    traced_s = time.perf_counter() - t0
    main = estimates[batch_size] if batch_size else estimates[max(estimates)]
    result: dict[str, Any] = {
        "model_ref": model_ref,
        "gpu": gpu.name,
        "precision": precision,
        "optimizer": optimizer,
        "checkpointing": checkpointing,
        "accumulation": accumulation,
        "target": target,
        "data_parallel": data_parallel,
        **main.to_json(),
        "capacity_bytes": gpu.capacity_bytes,
        "limit_bytes": limit,
        "limit_source": limit_source,
        "trace_seconds": round(traced_s, 3),
    }
    rows: list[dict[str, Any]] = []
    if need_fit:
        t1 = time.perf_counter()
        # every traced batch, --batch-size's too: exact there, and the range the fit answers
        # (the --sweep refusals, the --max-batch search) reaches from the largest of them
        model = FittedMemoryModel([estimates[b] for b in sizes], judged, traces=traces)
        result["fit"] = {
            "points": sizes,
            "c_step": int(model.logical.c_step),
            "c0": int(model.logical.c0),
            "slope": int(model.logical.slope),
            "residual": model.logical.residual,
            "allocator_overhead": model.frag,
        }
        for b in sweep_sizes:
            if cannot_train_alone(b):  # the fit would answer it; the step itself fails
                rows.append({"batch_size": b, "error": LONE_SAMPLE_ROW})
                continue
            try:
                rows.append(
                    {
                        "batch_size": b,
                        "peak_logical_bytes": model.predict_logical(b),
                        "peak_reserved_bytes": model.predict_reserved(b),
                        "peak_device_bytes": model.predict(b),
                        "fits": model.predict(b) <= limit,
                    }
                )
            except ExtrapolationError as exc:
                rows.append({"batch_size": b, "error": str(exc)})
        if sweep_sizes:
            result["sweep"] = rows
        if max_batch:
            try:
                mb = model.max_batch(limit, margin_bytes)
            except ExtrapolationError as exc:
                mb = None
                result["max_batch_error"] = str(exc)
            if mb is not None and cannot_train_alone(mb):
                # an answer below every traced batch is the fit's alone: batch 1 of a model
                # that cannot train on one sample "fitted" (traced from 2 on); the smallest
                # traced batch is what it needs
                mb = None
            result["max_batch"] = mb
            # the search stops at the cap: an answer there is a lower bound
            result["max_batch_capped"] = mb is not None and mb >= model.max_batch_cap
            result["gpu_memory_bytes"] = limit
            result["margin_bytes"] = margin_bytes
            if mb is None and "max_batch_error" not in result:
                # "none" alone left the user to guess how far off the limit is
                need_batch, need = _smallest_need(model, lone_sample)
                result["max_batch_needs_batch_size"] = need_batch
                result["max_batch_needs_bytes"] = need
        result["fit_seconds"] = round(time.perf_counter() - t1, 4)
    # written as the other commands write: a full disk or a reader gone (| head) is an
    # error line or exit 141, not a traceback
    with stdout_written():
        if as_json:
            sys.stdout.write(json.dumps(result) + "\n")
            sys.stdout.flush()
            return result
        # names (the model's reference, a --gpu-table's GPU) are text, neither Rich markup nor
        # control characters
        title = as_text(
            f"{model_ref}  b={main.batch_size}  {precision}  {optimizer}  on {gpu.name}"
        )
        table = Table(title=title, show_header=True)
        table.add_column("")
        table.add_column("bytes", justify="right")
        table.add_column("", justify="right")
        for key, value in main.breakdown.items():
            table.add_row(f"  {as_text(key)}", str(value), format_bytes(value))
        for label, value in (
            ("peak logical (live tensors)", main.peak_logical_bytes),
            ("peak allocated (allocator)", main.peak_allocated_bytes),
            ("peak reserved (allocator)", main.peak_reserved_bytes),
            ("CUDA context", main.context_bytes),
            ("peak on the GPU", main.peak_device_bytes),
            (f"{as_text(gpu.name)} capacity", gpu.capacity_bytes),
            # (a --gpu-memory above the capacity was capped: the limit is the capacity)
            *((("limit (--gpu-memory)", limit),) if limit_source == "--gpu-memory" else ()),
        ):
            table.add_row(label, str(value), format_bytes(value))
        out.print(table)
        out.print(
            "fits" if main.fits else "[red]does NOT fit[/red]",
            f"within {limit_label} on {as_text(gpu.name)}",
        )
        out.print(f"model family (for GPU sharing): {as_text(main.family or 'none recognised')}")
        for w in main.warnings:
            with stderr_written():  # (a full stderr is no failure to write the output)
                err.print(
                    f"[yellow]warning:[/yellow] {as_text(w)}", highlight=False, soft_wrap=True
                )
        if rows:
            st = Table(
                title="M(b) (fitted from b = "
                + ",".join(map(str, sizes))
                + f"; verdicts within {limit_label})"
            )
            for col in ("batch", "logical", "reserved", "on the GPU", ""):
                st.add_column(col, justify="right")
            for r in rows:
                if "error" in r:
                    st.add_row(
                        str(r["batch_size"]), "-", "-", "-", f"refused: {as_text(r['error'])}"
                    )
                else:
                    st.add_row(
                        str(r["batch_size"]),
                        format_bytes(r["peak_logical_bytes"]),
                        format_bytes(r["peak_reserved_bytes"]),
                        format_bytes(r["peak_device_bytes"]),
                        "fits" if r["fits"] else "OOM",
                    )
            out.print(st)
        if max_batch:
            out.print(
                f"largest safe batch within {limit_label} - margin "
                f"{format_bytes(margin_bytes)}: {as_text(_max_batch_answer(result, lone_sample))}",
                highlight=False,
                soft_wrap=True,
            )
    return result


def _max_batch_answer(result: dict[str, Any], lone_sample: bool = False) -> str:
    """The ``--max-batch`` answer of ``result`` in words (``lone_sample``: the model cannot
    train on a batch of one sample)."""
    if "max_batch_error" in result:
        return f"not known: {result['max_batch_error']}"
    mb = result["max_batch"]
    if not mb:
        need_batch = result["max_batch_needs_batch_size"]
        budget = result["limit_bytes"] - result["margin_bytes"]
        why = " (it cannot train on a batch of 1 sample)" if lone_sample else ""
        return (
            f"none: it does not fit even at batch {need_batch}{why}, which needs "
            f"{format_bytes(result['max_batch_needs_bytes'])} on the GPU (the CUDA context's "
            f"{format_bytes(result['context_bytes'])} included), over the "
            f"{format_bytes(budget)} the limit leaves after the margin; give a larger "
            "--gpu-memory or --gpu, or a smaller model or --precision"
        )
    if result["max_batch_capped"]:
        from danlu.estimate.memory.fit import DEFAULT_MAX_EXTRAPOLATION

        return (
            f"at least {mb} (the search stops at {DEFAULT_MAX_EXTRAPOLATION:g}x the largest "
            "traced batch; trace larger --fit-points)"
        )
    return str(mb)


def _smallest_need(model: FittedMemoryModel, lone_sample: bool) -> tuple[int, int]:
    """The smallest batch ``model`` answers and its peak bytes on the GPU: batch 1, else
    (the fit refuses it, or the model cannot train on one sample: ``lone_sample``) the
    smallest traced batch, what ``--max-batch`` says is needed when even that does not
    fit."""
    from danlu.estimate.memory import ExtrapolationError

    smallest = min(model.estimates)
    if lone_sample:
        return smallest, model.predict(smallest)
    try:
        return 1, model.predict(1)
    except ExtrapolationError:
        return smallest, model.predict(smallest)


COMMON_GPU_GIB = frozenset({8, 10, 11, 12, 16, 20, 24, 32, 40, 48, 64, 80, 94, 96, 141, 192})
"""GPU memory sizes as GPUs are sold, in GiB: ``--gpu-memory`` of one of them in decimal
gigabytes (``80G``) gets a note (:func:`_decimal_gpu_size_note`)."""
_DECIMAL_GIGABYTES = re.compile(r"^\s*([0-9]+)\s*(?:g|gb)\s*$", re.IGNORECASE)


def _decimal_gpu_size_note(gpu_memory: str) -> str | None:
    """A note when ``gpu_memory`` is a common GPU size (:data:`COMMON_GPU_GIB`) written in
    decimal gigabytes: ``80G`` is 80e9 bytes, 74.5 GiB, where an 80 GiB GPU was surely
    meant; judged against it, batches that fit such a GPU were answered "does NOT fit". Not
    an error: the size is what was written. None for any other size."""
    match = _DECIMAL_GIGABYTES.match(gpu_memory)
    if match is None or int(match.group(1)) not in COMMON_GPU_GIB:
        return None
    n = int(match.group(1))
    text = as_text(gpu_memory.strip())
    article = "an" if str(n).startswith("8") or n == 11 else "a"  # an 80, an 8, an 11
    return (
        f"--gpu-memory {text} is {n}e9 bytes ({format_bytes(n * 1000**3)}); write {n}GiB "
        f"for {article} {n} GiB GPU"
    )


def _margin_bytes(margin: str, limit: int) -> int:
    """``--margin`` as bytes: a size (``2GiB``) or a percentage of the limit (``5%``)."""
    text = margin.strip()
    if text.endswith("%"):
        try:
            share = float(text[:-1])
        except ValueError:
            share = float("nan")
        if not math.isfinite(share):
            raise SpecError("--margin", f"{margin!r} is not a percentage; write e.g. 5%")
        if not 0.0 <= share < 100.0:  # "100%" was refused as "not a percentage"
            raise SpecError(
                "--margin",
                f"{margin!r} is no share of the limit to keep free: write one from 0% up to "
                "below 100%, e.g. 5%",
            )
        return int(limit * share / 100.0)
    return parse_bytes(text, "--margin")


def check_enabled(given: frozenset[str], *, sweep: str | None, max_batch: bool) -> None:
    """Refuse ``--margin`` without ``--max-batch`` and ``--fit-points`` without ``--sweep``
    or ``--max-batch`` (``given``: :func:`given_options`): neither changed anything then, yet
    the output looked as if it had (``--sweep 8,16 --margin 10%`` judged every row against
    the whole limit, no margin kept)."""
    if "margin" in given and not max_batch:
        raise SpecError(
            "--margin",
            "the safety margin is kept by --max-batch only and changes nothing without it "
            "(--sweep and the verdicts are judged against the whole limit): add "
            "--max-batch, or leave --margin out (a smaller --gpu-memory keeps a margin "
            "everywhere)",
        )
    if "fit_points" in given and not (sweep is not None or max_batch):
        raise SpecError(
            "--fit-points",
            "the batch sizes traced to fit M(b) serve --sweep and --max-batch only and "
            "change nothing without them: add --sweep 1,2,4,8 or --max-batch, or leave "
            "--fit-points out",
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
            check_enabled(given, sweep=sweep, max_batch=max_batch)
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
                margin=margin,
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
