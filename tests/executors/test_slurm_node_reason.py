"""A node's ``Reason`` whose free text holds ``=`` (an admin's ``GPU xid=79``) is read whole,
up to the ``[user@time]`` Slurm appends: the ``xid`` was read as a field of its own, and the
node's reason was cut to ``GPU``. Fields after the reason are still read."""

from __future__ import annotations

import pytest

from danlu.executors.slurmctl import job_from_fields, node_from_fields, parse_fields

STAMP = "[root@2026-11-29T04:58:05]"
NODE = "NodeName=n1 Gres=gpu:a100:4 State=IDLE+DRAIN RealMemory=1000"


@pytest.mark.parametrize(
    ("reason", "after"),
    [
        ("GPU xid=79 on gpu 3", ""),
        ("GPU xid=79 on gpu 3", " Comment=(null)"),
        ("ecc=2 retired=1", " Comment=see ticket"),
        ("maintenance", " Comment=(null)"),
    ],
)
def test_a_reason_with_an_equals_sign_is_read_whole(reason: str, after: str) -> None:
    fields = parse_fields(f"{NODE} Reason={reason} {STAMP}{after}")
    assert node_from_fields(fields).reason == reason
    assert "xid" not in fields and "ecc" not in fields
    if after:
        assert fields["Comment"] == after.split("=", 1)[1]


def test_a_job_reason_without_a_stamp_ends_at_the_next_field() -> None:
    fields = parse_fields("JobId=8 JobState=CANCELLED Reason=None ExitCode=0:9")
    assert fields["Reason"] == "None" and fields["ExitCode"] == "0:9"
    assert job_from_fields(fields).signal == 9
