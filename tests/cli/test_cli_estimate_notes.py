"""``danlu estimate``'s notes and warnings on stderr.

* They, and the ``--max-batch`` answer, are one line each, as its note on the fit points
  is: written to a pipe or a file (a CI log, ``2>&1 | grep``), Rich cut them at 80
  columns, so ``warning: out of memory on h100: the step's peak of 869072896 bytes is over
  its`` ended a line and its limit began the next.
* A stderr that cannot be written (``2>/dev/full``) costs the note, not the estimate: the
  note on a ``--gpu-memory`` above the GPU's capacity ended the command before anything was
  traced (exit 2, nothing printed), and a warning ended it halfway through its output with
  "cannot write the output" (exit 2), as its note on the fit points never did.
"""

from __future__ import annotations

import errno
import io
import re
import sys
from collections.abc import Iterator
from dataclasses import replace

import pytest
from typer.testing import CliRunner

import danlu.estimate.memory as memory
from danlu.cli.estimate import run_estimate
from danlu.cli.main import app
from danlu.estimate.memory import StepTrace, TraceRequest, get_gpu, replay

pytest.importorskip("torch")

MODEL = "danlu.estimate.zoo:mlp_small"


@pytest.fixture(scope="module")
def traced() -> dict[int, StepTrace]:
    """mlp_small traced once at the batch sizes the tests ask for."""
    return {t.batch_size: t for t in memory.trace(TraceRequest(MODEL, (1, 2)))}


@pytest.fixture
def canned(traced: dict[int, StepTrace], monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The command's traces served from :func:`traced` (no subprocess per invocation)."""

    def fake(req: TraceRequest, *args: object, **kwargs: object) -> list[StepTrace]:
        return [traced[b] for b in req.batch_sizes]

    monkeypatch.setattr(memory, "trace", fake)
    yield


def _lines(text: str, start: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith(start)]


def test_a_note_and_a_long_answer_are_one_line_each(canned: None) -> None:
    args = ["estimate", MODEL, "-b", "2", "--gpu-memory", "200GiB", "--max-batch"]
    res = CliRunner().invoke(app, [*args, "--fit-points", "1,2"])
    assert res.exit_code == 0, res.output
    (note,) = _lines(res.stderr, "note:")
    assert note.endswith("choose a larger --gpu for more)"), res.stderr
    assert len(note) > 80
    (answer,) = _lines(res.stdout, "largest safe batch")
    assert answer.endswith("trace larger --fit-points)"), res.stdout


def test_a_warning_is_one_line(canned: None) -> None:
    """The out-of-memory warning names the limit it is judged against, readable and in
    bytes: it said "is over its 104857600 bytes", as if 100 MiB were the h100's memory."""
    res = CliRunner().invoke(app, ["estimate", MODEL, "-b", "2", "--gpu-memory", "100MiB"])
    assert res.exit_code == 0, res.output
    (warning,) = _lines(res.stderr, "warning:")
    assert warning.startswith("warning: out of memory on h100: the step's peak of ")
    assert re.search(r"peak of \d+\.\d+MiB \(\d+ bytes\)", warning), warning
    assert warning.endswith(
        f"is over the 100.0MiB ({100 << 20} bytes) it is judged against (--gpu-memory)"
    ), res.stderr


def test_a_warning_on_the_gpus_own_capacity_names_it(traced: dict[int, StepTrace]) -> None:
    """Replayed for a GPU as the table has it (no ``--gpu-memory``), the limit is its
    capacity, and the warning says so."""
    small = replace(get_gpu("t4"), capacity_bytes=1 << 20)  # a GPU of 1 MiB
    (warning,) = [w for w in replay(traced[2], small).warnings if w.startswith("out of")]
    assert warning.endswith(
        f"is over the 1.0MiB ({1 << 20} bytes) it is judged against (the t4's capacity)"
    ), warning


class FullStream(io.StringIO):
    """A stderr on a full disk (``2>/dev/full``): every write fails."""

    def write(self, text: str) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")


@pytest.mark.parametrize(
    ("gpu_memory", "fits"), [("200GiB", True), ("100MiB", False)], ids=["note", "warning"]
)
def test_a_full_stderr_costs_the_note_not_the_estimate(
    canned: None, monkeypatch: pytest.MonkeyPatch, gpu_memory: str, fits: bool
) -> None:
    stdout = io.StringIO()
    with monkeypatch.context() as streams:
        streams.setattr(sys, "stderr", FullStream())
        streams.setattr(sys, "stdout", stdout)
        result = run_estimate(
            MODEL,
            batch_size=2,
            precision="fp32",
            gpu_name="h100",
            optimizer="adamw",
            checkpointing=False,
            accumulation=1,
            sweep=None,
            max_batch=True,
            gpu_memory=gpu_memory,
            margin="5%",
            fit_points="1,2",
            gpu_table=None,
            target="cuda",
            as_json=False,
        )
    assert result["fits"] is fits
    assert "largest safe batch" in stdout.getvalue()  # the output's last line
