"""``load_spec_data`` given a named pipe (``mkfifo``) opened it and waited for a writer, for
ever with none (only ``danlu submit`` looked first); it is now a :class:`SpecError` naming
``path``. A pipe handed over open (``/dev/fd/N``, ``/dev/stdin``) is still read."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path
from types import FrameType

import pytest

from danlu.core.errors import SpecError
from danlu.core.spec import load_spec, load_spec_data


@pytest.fixture
def no_hang() -> Iterator[None]:
    """A read that would wait for ever is cut off (an exception, failing the test)."""

    def stop(signum: int, frame: FrameType | None) -> None:
        raise RuntimeError("the spec file's reading blocked")

    before = signal.signal(signal.SIGALRM, stop)
    signal.alarm(10)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, before)


@pytest.mark.parametrize("as_given", [str, Path])
def test_a_named_pipe_is_refused_naming_path(
    no_hang: None, tmp_path: Path, as_given: type[str] | type[Path]
) -> None:
    fifo = tmp_path / "job.yaml"
    os.mkfifo(fifo)
    with pytest.raises(SpecError) as caught:
        load_spec_data(as_given(fifo))
    assert caught.value.field == "path"
    assert f"{str(fifo)!r} is a named pipe, not a file" in caught.value.message
    with pytest.raises(SpecError, match="named pipe"):
        load_spec(fifo)


def test_a_pipe_handed_over_open_is_still_read(no_hang: None) -> None:
    read_end, write_end = os.pipe()
    try:
        os.write(write_end, b"name: piped\ncommand: [echo, hi]\n")
        os.close(write_end)
        assert load_spec_data(f"/dev/fd/{read_end}") == {
            "name": "piped",
            "command": ["echo", "hi"],
        }
    finally:
        os.close(read_end)


def test_a_path_that_cannot_be_looked_at_is_still_a_read_error(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="cannot read job spec"):
        load_spec_data(tmp_path / "missing.yaml")
