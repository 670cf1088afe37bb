"""A workload file is closed when :func:`load_workload` returns or refuses it, whatever the
error: an unrecognised header used to leave it open (a ResourceWarning at garbage
collection), and so did a bad row while its error was held."""

from __future__ import annotations

from pathlib import Path
from typing import IO, Any

import pytest

from danlu.core.errors import DataError
from danlu.sim.workload import load_workload

HEADER = "name,submit_time,gpus,duration\n"


@pytest.fixture
def opened(monkeypatch: pytest.MonkeyPatch) -> list[IO[Any]]:
    """Every file opened through :meth:`Path.open` during the test."""
    handles: list[IO[Any]] = []
    real = Path.open

    def tracking(self: Path, *args: Any, **kwargs: Any) -> IO[Any]:
        handle = real(self, *args, **kwargs)
        handles.append(handle)
        return handle

    monkeypatch.setattr(Path, "open", tracking)
    return handles


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("a,b\n1,2\n", "unrecognised workload columns"),  # the header matches no format
        (HEADER + "a,0,1,ten\n", "must be a number"),  # a bad value in a row
        (HEADER + "a,0,1,5\na,1,1,5\n", "used twice"),  # a fault found after the last row
        (HEADER, "no GPU job to simulate"),  # a header without rows
        ("name,name\n", "more than once"),  # a repeated column
    ],
)
def test_a_refused_workload_file_is_closed(
    tmp_path: Path, opened: list[IO[Any]], text: str, error: str
) -> None:
    path = tmp_path / "workload.csv"
    path.write_text(text)
    with pytest.raises(DataError, match=error) as caught:
        load_workload(path)
    assert caught.value is not None  # the error (and its traceback) is still held here
    assert opened, "the workload was not opened through Path.open"
    assert all(handle.closed for handle in opened)


def test_a_loaded_workload_file_is_closed(tmp_path: Path, opened: list[IO[Any]]) -> None:
    path = tmp_path / "workload.csv"
    path.write_text(HEADER + "a,0,1,5\nb,10,2,7\n")
    workload = load_workload(path)
    assert [job.request.id for job in workload.jobs] == ["a", "b"]
    assert opened and all(handle.closed for handle in opened)
