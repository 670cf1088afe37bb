"""Every danlu error pickles and comes back as itself: raised in a Ray task or a process
pool's worker it reaches the caller with its type, message and fields. Exception's own
unpickling calls ``cls(*args)``, which failed (TypeError) for every error whose ``__init__``
takes more than its message (SpecError, ApiError, WaitTimeout, ...)."""

from __future__ import annotations

import ast
import concurrent.futures
import importlib
import multiprocessing
import pickle
from pathlib import Path

import pytest

from danlu.client.errors import (
    ApiError,
    InvalidRequestError,
    NotFoundError,
    UnschedulableRequestError,
    WaitTimeout,
)
from danlu.core.errors import DanluError, SpecError, UnknownNameError
from danlu.core.metric_record import RecordError
from danlu.core.paging import StalledListError
from danlu.executors.errors import GpusBusyError, NodeLaunchError, PartitionClosedError
from danlu.executors.ray_claim import ClaimRecord, ClusterClaimedError

SRC = Path(__file__).resolve().parents[2] / "src" / "danlu"


def _samples() -> dict[str, DanluError]:
    """One instance of each danlu error whose ``__init__`` is its own, by ``module:Class``."""
    from danlu.cli.run import OutputFailed
    from danlu.core import units
    from danlu.estimate.memory.trace_result import LoneSampleError
    from danlu.estimate.memory.trace_worker import SparseTensorMade
    from danlu.server import errors as server_errors
    from danlu.server.home_port import ListenError
    from danlu.train.checkpoint import loading

    return {
        "core/errors.py:SpecError": SpecError("resources.gpus", "must be 1 or more"),
        "core/errors.py:UnknownNameError": UnknownNameError("policy", "lifo", ["fifo", "sjf"]),
        "core/units.py:_Refused": units._Refused("--since", "is no time", "gives 'd' twice"),
        "core/metric_record.py:RecordError": RecordError("step", "must be whole", "whole"),
        "client/errors.py:ApiError": ApiError(302, "redirect", None, "moved", "GET", "/x"),
        "client/errors.py:WaitTimeout": WaitTimeout(["j1"], [{"id": "j0"}], 2.5),
        "core/paging.py:StalledListError": StalledListError(7, 4),
        "executors/errors.py:NodeLaunchError": NodeLaunchError("no GPU", nodes=("n1",)),
        "executors/errors.py:PartitionClosedError": PartitionClosedError("closed", "gpu", "DRAIN"),
        "executors/errors.py:GpusBusyError": GpusBusyError("busy", {"j1": [(0, 1)]}),
        "executors/ray_claim.py:ClusterClaimedError": ClusterClaimedError(
            "claimed", ClaimRecord("id1", "/srv/danlu", "h1", 42, "http://h1:8470", 1.5)
        ),
        "server/home_port.py:ListenError": ListenError("cannot listen", "Address already in use"),
        "server/errors.py:NotFoundError": server_errors.NotFoundError("job", "abc", "id", "?"),
        "server/errors.py:_FieldError": server_errors._FieldError("taken", field="name"),
        "server/errors.py:AdmissionError": server_errors.AdmissionError("gpus", "too many"),
        "train/checkpoint/loading.py:_OtherFormatError": loading._OtherFormatError("v9", "new"),
        "cli/run.py:OutputFailed": OutputFailed(OSError(28, "No space left on device")),
        "estimate/memory/trace_result.py:LoneSampleError": LoneSampleError("batch norm"),
        "estimate/memory/trace_worker.py:SparseTensorMade": SparseTensorMade("aten.embedding"),
    }


def _same(one: BaseException, other: BaseException) -> None:
    assert type(other) is type(one)
    assert str(other) == str(one)
    assert repr(other.args) == repr(one.args)
    assert repr(vars(other)) == repr(vars(one))


@pytest.mark.parametrize("key", sorted(_samples()))
def test_each_error_with_its_own_init_comes_back_from_pickle(key: str) -> None:
    error = _samples()[key]
    _same(error, pickle.loads(pickle.dumps(error)))


@pytest.mark.parametrize(
    "error",
    [
        InvalidRequestError(422, "SpecError", "resources.gpus", "must be 1 or more", "POST", "/j"),
        NotFoundError(404, "NotFoundError", "id", "no job 'x'", "GET", "/api/v1/jobs/x"),
        UnschedulableRequestError(422, "AdmissionError", "gpus", "never fits"),
        WaitTimeout(["j1"], [], 1.0, "array 7 (a) not finished after 1s"),
        DanluError("plain"),
    ],
    ids=lambda e: type(e).__name__,
)
def test_subclasses_and_plain_errors_come_back_from_pickle(error: DanluError) -> None:
    error.add_note("while submitting")
    back = pickle.loads(pickle.dumps(error))
    _same(error, back)
    assert back.__notes__ == ["while submitting"]
    # still caught as what it is
    assert isinstance(back, type(error))


def _refuse(gpus: int) -> int:
    raise SpecError("resources.gpus", f"must be 1 or more (got {gpus})")


def test_an_error_raised_in_a_worker_process_reaches_the_caller_as_itself() -> None:
    context = multiprocessing.get_context("fork")
    with concurrent.futures.ProcessPoolExecutor(1, mp_context=context) as pool:
        future = pool.submit(_refuse, 0)
        with pytest.raises(SpecError) as caught:
            future.result(timeout=60)
    assert caught.value.field == "resources.gpus"
    assert caught.value.message == "must be 1 or more (got 0)"


def _danlu_error_classes_with_own_init() -> set[str]:
    """``module:Class`` of every class in src/danlu that defines ``__init__`` and derives,
    by the names of its bases, from DanluError."""
    bases: dict[str, set[str]] = {}
    own_init: dict[str, str] = {}
    for path in sorted(SRC.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                names = {b.id if isinstance(b, ast.Name) else ast.unparse(b) for b in node.bases}
                bases.setdefault(node.name, set()).update(n.split(".")[-1] for n in names)
                if any(isinstance(i, ast.FunctionDef) and i.name == "__init__" for i in node.body):
                    own_init[f"{path.relative_to(SRC)}:{node.name}"] = node.name

    def is_danlu_error(name: str, seen: frozenset[str] = frozenset()) -> bool:
        if name == "DanluError":
            return True
        return any(
            is_danlu_error(base, seen | {name}) for base in bases.get(name, ()) if base not in seen
        )

    return {key for key, name in own_init.items() if is_danlu_error(name)}


def test_every_error_with_its_own_init_has_a_sample_here() -> None:
    assert _danlu_error_classes_with_own_init() == set(_samples())
    for key, error in _samples().items():
        path, name = key.split(":")
        module = path.removesuffix(".py").replace("/", ".")
        assert type(error) is getattr(importlib.import_module(f"danlu.{module}"), name)
