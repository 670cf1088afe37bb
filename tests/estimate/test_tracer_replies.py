"""What :func:`danlu.estimate.memory.trace` makes of a worker's replies and of references it
cannot look up in this process: named errors, not bare exceptions."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from danlu.core.errors import DataError, SpecError
from danlu.estimate.memory import TraceRequest, trace, tracer


def _fake_worker(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, code: str) -> None:
    """Run ``code`` instead of the trace worker (it gets the request on stdin too)."""
    script = tmp_path / "fake_worker.py"
    script.write_text(code)
    monkeypatch.setattr(tracer, "_WORKER", [sys.executable, str(script)])


def test_a_reply_cut_off_by_the_workers_death_is_a_data_error(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A worker killed while it wrote its result (for its memory, or by the timeout) left half
    a JSON line: json.loads raised a bare JSONDecodeError out of trace()."""
    _fake_worker(
        monkeypatch,
        tmp_path,
        "import os, sys\nsys.stdin.read()\n"
        'sys.stdout.write(\'{"progress": {"done": 0, "total": 1, "batch_size": 1}}\\n\')\n'
        'sys.stdout.write(\'{"result": [{"batch_size": 1, "eve\')\nsys.stdout.flush()\n'
        "os._exit(137)\n",
    )
    with pytest.raises(DataError, match=r"failed: the tracer exited with status 137"):
        trace(TraceRequest("danlu.estimate.zoo:mlp_small", (1,)))


def test_a_failure_whose_error_output_is_not_utf8_is_quoted(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The worker's stderr (the user's code writes there too) was read back strictly in the
    locale's encoding: a byte that is not UTF-8 raised UnicodeDecodeError instead of the
    failure's DataError."""
    _fake_worker(
        monkeypatch,
        tmp_path,
        "import os, sys\nsys.stdin.read()\nos.write(2, b'model says \\xff\\xfe\\n')\nsys.exit(3)\n",
    )
    with pytest.raises(DataError, match="exited with status 3") as caught:
        trace(TraceRequest("danlu.estimate.zoo:mlp_small", (1,)))
    assert "model says \ufffd\ufffd" in str(caught.value)


def test_the_request_pipe_is_closed_when_the_worker_died_before_reading(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, started_workers: list[subprocess.Popen[str]]
) -> None:
    """A request longer than the pipe's buffers failed in write() with BrokenPipeError, and
    the pipe was left open (a ResourceWarning once collected)."""
    _fake_worker(monkeypatch, tmp_path, "import sys\nsys.exit(5)\n")
    long_path = str(tmp_path / ("x" * 200) / ("y" * 200)) * 500  # ~200 kB of request
    with pytest.raises(DataError, match="exited with status 5"):
        trace(TraceRequest("danlu.estimate.zoo:mlp_small", (1,), sys_path=(long_path,)))
    (proc,) = started_workers
    assert proc.stdin is not None and proc.stdin.closed
    assert proc.stdout is not None and proc.stdout.closed


@pytest.mark.parametrize("ref", ["__main__:factory", "__main__.sub:factory"])
def test_a_factory_in_main_is_a_model_ref_error(ref: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The ``danlu`` console script's ``__main__`` has no ``__spec__``: looking it up raised a
    bare ValueError. The worker's ``__main__`` is never the user's script anyway."""
    monkeypatch.setattr(sys.modules["__main__"], "__spec__", None)
    with pytest.raises(SpecError, match="MODEL_REF") as caught:
        tracer.validate(TraceRequest(ref, (1,)))
    assert "put the factory in a module" in str(caught.value)


def test_a_module_imported_without_a_spec_is_left_to_the_worker(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """find_spec raises ValueError for a module in sys.modules whose ``__spec__`` is None;
    such a module is there to import, so validation lets it through."""
    import types

    module = types.ModuleType("estimate_no_spec_module")
    module.__spec__ = None
    monkeypatch.setitem(sys.modules, "estimate_no_spec_module", module)
    tracer.validate(TraceRequest("estimate_no_spec_module:factory", (1,)))


def _forking_models(tmp_path: Path) -> Path:
    """A module of factories that fork a process which, unless killed, writes ``survived``
    after 20 s; one factory then hangs, the other returns a model."""
    marker = tmp_path / "survived"
    (tmp_path / "forking_models.py").write_text(
        "import os, time\n"
        "def _fork():\n"
        "    if os.fork() == 0:\n"
        "        time.sleep(20)\n"
        f"        open({str(marker)!r}, 'w').write('survived')\n"
        "        os._exit(0)\n"
        "def hangs():\n"
        "    _fork()\n"
        "    time.sleep(3600)\n"
        "def returns():\n"
        "    _fork()\n"
        "    from danlu.estimate.zoo import mlp_small\n"
        "    return mlp_small()\n"
    )
    return marker


@pytest.mark.skipif(not hasattr(sys.modules["os"], "fork"), reason="needs os.fork")
def test_the_timeout_holds_when_the_factory_forked_a_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The forked process held the worker's output pipe: after the timeout killed the worker,
    reading the pipe to its end waited for that process too (for good, for one that never
    ends). The worker runs in a process group of its own, killed as a whole."""
    marker = _forking_models(tmp_path)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(DataError, match="timed out after 2 s"):
        trace(TraceRequest("forking_models:hangs", (1,)), timeout_s=2.0)
    assert not marker.exists()  # killed with the worker, not left to finish its 20 s


@pytest.mark.skipif(not hasattr(sys.modules["os"], "fork"), reason="needs os.fork")
def test_a_process_the_factory_leaves_running_is_stopped_with_its_worker(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The trace is answered at once, and nothing the factory started outlives it (the
    answer waited for the forked process to close the pipe)."""
    marker = _forking_models(tmp_path)
    monkeypatch.chdir(tmp_path)
    (result,) = trace(TraceRequest("forking_models:returns", (1,)), timeout_s=60.0)
    assert result.batch_size == 1 and result.peak_logical_bytes > 0
    assert not marker.exists()
