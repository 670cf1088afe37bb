"""What Slurm's commands print when it is not what danlu expects (no Slurm needed): job ids
with non-ASCII digits, lines of other shapes. Each is read as no job id, or refused with a
:class:`SlurmError` naming the command, never a raw ``ValueError``."""

from __future__ import annotations

import pytest
from slurm_fakes import Printed

from danlu.executors.slurmctl import SlurmError, job_from_fields, parse_fields


@pytest.mark.parametrize("printed", ["²\n", "1²;cluster\n", "١٢\n", "\n"])
def test_sbatch_output_that_is_not_an_ascii_job_id_is_refused(printed: str) -> None:
    """``str.isdigit`` took ``²`` (and ``int`` then raised ``ValueError``); Arabic-Indic
    digits passed both and made a job id Slurm never printed."""
    commands = Printed({"sbatch": printed})
    with pytest.raises(SlurmError, match=r"sbatch printed .* not a job id"):
        commands.sbatch(["--nodes=1"], "batch.sh", {})


def test_sbatch_job_id_with_a_cluster_name() -> None:
    assert Printed({"sbatch": "4242;gpu-cluster\n"}).sbatch([], "batch.sh", {}) == 4242


def test_squeue_lines_whose_job_id_is_not_ascii_digits_are_skipped() -> None:
    printed = (
        "12|RUNNING|2026-11-29T04:58:05|None\n"
        "1²|RUNNING|2026-11-29T04:58:05|None\n"
        "13_2|PENDING|N/A|Priority\n"
        "\n"
        "garbage\n"
    )
    jobs = Printed({"squeue": printed}).jobs([12, 1, 13])
    assert list(jobs) == [12] and jobs[12].running and jobs[12].started_at is not None


def test_find_skips_ids_that_are_not_ascii_digits() -> None:
    assert Printed({"squeue": "7\n²\n8_1\n9\n"}).find("danlu.a.0") == [7, 9]


@pytest.mark.parametrize(
    ("exit_field", "code", "sig"),
    [
        ("0:300", None, None),
        ("0:125", None, None),
        ("0:64", 192, 64),
        ("300:0", None, None),
        ("99999999999999999999:0", None, None),
        ("7:0", 7, None),
        ("0:9", 137, 9),
        ("0:", 0, None),
        ("255:0", 255, None),
    ],
)
def test_an_exit_code_that_is_no_status_nor_signal_is_unknown(
    exit_field: str, code: int | None, sig: int | None
) -> None:
    """``0:300`` read as signal 300, exit 428; a status of 300 or 10**20 as that exit."""
    job = job_from_fields(parse_fields(f"JobId=12 JobState=FAILED ExitCode={exit_field}"))
    assert (job.exit_code, job.signal) == (code, sig)
