"""danlu.train: checkpoints, the metrics file, the API's URL, the batch's bounds.

1. ``CheckpointManager``'s arguments were compared, not checked: ``keep_last=1.5`` raised a
   bare ``TypeError`` in the retention of the first save (after its commit), ``"3"`` one at
   construction, ``every_steps=2.5`` saved on steps 5, 10, ..., an ``every_seconds`` of NaN
   never saved, and ``incremental="no"`` was on. Each is a ``ConfigError`` naming it now.
2. A checkpoint metric JSON cannot write (a loss passed as a tensor, an accuracy as
   ``np.float32``) raised a bare ``TypeError`` from the manifest once every file was written
   (an async save's at the next save, the run going on without the checkpoint). A one-element
   tensor or NumPy value is stored as its number now; anything else is refused by name first.
3. Retention removed every directory whose name starts with ``ckpt-``: a ``ckpt-pretrained``
   of the user's in the checkpoint directory was deleted at the first save. Only the names a
   save gives (``ckpt-<step:012d>-<8 hex digits>``) are removed now.
4. A metrics-file write that failed part way (a full disk) left half a line in the JSONL file,
   and the request, written again whole at the next flush, put its first records there twice.
   The file is cut back to where it ended now.
5. A metrics file that is a directory (``metrics_file="runs"``, ``DANLU_METRICS_FILE=/tmp``)
   failed every append: the records were kept, then dropped, with one WARNING. It is refused
   by name when the reporter is made (:func:`danlu.train.init`).
6. ``DANLU_API_URL`` with a query or fragment took the metrics path into the query (or
   dropped it): every POST went to another endpoint and its records were dropped as refused.
   A user name or password before the host is not sent either. All are refused by name now.
7. An adaptive batch's ``max_batch`` below its ``b0`` was taken: the schedule's clamp gave
   ``max_batch`` from the first step (``AdaptiveBatch("schedule", 64, max_batch=32)`` trained
   at 32). It is refused by name now.
8. ``ctx.epochs(n)`` (and ``fit(epochs=n)``) compared ``n`` unchecked: ``"3"`` (argparse
   without ``type=int``) was a bare ``TypeError``, ``2.5`` ran 3 epochs. ``n`` is an integer
   >= 0 now, else a ``ConfigError`` naming it.
9. ``init``'s switches ``resume``, ``async_checkpoint`` and ``incremental_checkpoint`` were
   read by truth: ``resume="no"`` resumed. They are True or False (or 0/1) now, as
   ``shuffle`` is, else a ``ConfigError`` naming them.
10. A sharded checkpoint's files were read whole to be hashed (rank 0 at each commit, every
    rank at each load's verification): a rank's shards, gigabytes in a large run, all in
    memory at once. They are hashed in chunks now.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import os
import subprocess
import sys
import textwrap
import tracemalloc
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

import danlu.train as dt
from danlu.core.errors import ConfigError, DataError
from danlu.train.batch import AdaptiveBatch, PowerSchedule
from danlu.train.checkpoint import CheckpointManager
from danlu.train.checkpoint.manager import MANIFEST
from danlu.train.env import JobEnv
from danlu.train.report import MetricsReporter

# -- 1. the manager's arguments ------------------------------------------------------------


@pytest.mark.parametrize(
    ("argument", "value"),
    [
        ("keep_last", 1.5),
        ("keep_last", "3"),
        ("keep_last", True),
        ("keep_best", 0.5),
        ("full_every", float("nan")),
        ("every_steps", 2.5),
        ("every_seconds", float("nan")),
        ("every_seconds", float("inf")),
        ("every_seconds", "60"),
        ("incremental", "no"),
        ("async_save", "false"),
        ("sharded", 2),
    ],
)
def test_manager_arguments_that_cannot_work_are_refused_by_name(
    tmp_path: Path, argument: str, value: Any
) -> None:
    with pytest.raises(ConfigError, match=argument):
        CheckpointManager(str(tmp_path), **{argument: value})


def test_manager_arguments_that_work_are_taken_as_before(tmp_path: Path) -> None:
    mgr = CheckpointManager(
        str(tmp_path),
        keep_last=2,
        keep_best=0,
        full_every=3,
        every_steps=5,
        every_seconds=60,
        incremental=1,
        async_save=False,
        sharded=False,
    )
    assert (mgr.keep_last, mgr.keep_best, mgr.full_every, mgr.every_steps) == (2, 0, 3, 5)
    assert mgr.every_seconds == 60 and mgr.incremental is True
    assert [s for s in range(1, 11) if mgr.should_save(s, now=0.0)] == [5, 10]


# -- 2. the checkpoint's metrics ----------------------------------------------------------


def _manifest(directory: Path) -> dict[str, Any]:
    (newest,) = [p for p in directory.iterdir() if p.name.startswith("ckpt-")]
    loaded: dict[str, Any] = json.loads((newest / MANIFEST).read_text())
    return loaded


@pytest.mark.parametrize("async_save", [False, True])
def test_a_tensor_or_numpy_metric_is_stored_as_its_number(tmp_path: Path, async_save: bool) -> None:
    with CheckpointManager(str(tmp_path), async_save=async_save, best_metric="loss") as mgr:
        metrics = {"loss": torch.tensor(0.25), "acc": np.float32(0.5), "n": np.int64(3)}
        mgr.save(1, {"w": torch.ones(2)}, metrics)
        mgr.wait()
    assert _manifest(tmp_path)["metrics"] == {"loss": 0.25, "acc": 0.5, "n": 3}
    assert [c.metrics["loss"] for c in CheckpointManager(str(tmp_path)).list_checkpoints()] == [
        0.25
    ]


@pytest.mark.parametrize(
    ("metrics", "named"),
    [
        ({"loss": torch.ones(3)}, "'loss'"),
        ({"loss": object()}, "'loss'"),
        ({1: 0.5}, "1"),
    ],
)
def test_a_metric_that_cannot_be_stored_is_refused_before_anything_is_written(
    tmp_path: Path, metrics: dict[Any, Any], named: str
) -> None:
    mgr = CheckpointManager(str(tmp_path), async_save=True)
    with pytest.raises(ConfigError, match=f"metric.*{named}"):
        mgr.save(1, {"w": torch.ones(2)}, metrics)
    mgr.close()  # nothing in flight failed either
    assert not [p for p in tmp_path.iterdir() if p.name.startswith("ckpt-")]


# -- 3. retention removes only danlu's directories ----------------------------------------


def test_retention_keeps_directories_it_did_not_write(tmp_path: Path) -> None:
    mine = tmp_path / "ckpt-pretrained"
    mine.mkdir()
    (mine / "weights.bin").write_bytes(b"user data")
    other = tmp_path / "ckpt-000000000001"  # another tool's, not a save's name
    other.mkdir()
    unfinished = tmp_path / "ckpt-000000000001-0123abcd"  # a save killed before its manifest
    unfinished.mkdir()
    (unfinished / "tensors.pt").write_bytes(b"half")
    mgr = CheckpointManager(str(tmp_path), keep_last=1, keep_best=0)
    for step in (1, 2, 3):
        mgr.save(step, {"w": torch.full((2,), float(step))})
    assert (mine / "weights.bin").read_bytes() == b"user data"
    assert other.is_dir()
    assert not unfinished.exists()  # a save's own leftover still goes
    assert [c.step for c in mgr.list_checkpoints()] == [3]


# -- 4. the metrics file on a full disk ---------------------------------------------------

_FILE_LIMIT_SCRIPT = textwrap.dedent(
    """
    import resource, signal, sys
    from danlu.train.report import MetricsReporter

    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG
    reporter = MetricsReporter(path=sys.argv[1])
    for step in range(50):
        reporter.report({"step": step, "loss": 1.0, "note": "x" * 50})
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (1000, hard))  # the disk fills mid-request
    reporter.flush()
    failed = reporter.errors
    resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))  # space again
    reporter.flush()
    print(failed, reporter.sent)
    """
)


def test_a_metrics_file_write_that_fails_part_way_leaves_no_half_line_or_repeat(
    tmp_path: Path,
) -> None:
    path = tmp_path / "metrics.jsonl"
    done = subprocess.run(
        [sys.executable, "-c", _FILE_LIMIT_SCRIPT, str(path)],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    failed, sent = (int(v) for v in done.stdout.split())
    assert failed == 1 and sent == 50  # the first flush failed, the second wrote them
    steps = [json.loads(line)["step"] for line in path.read_text().splitlines()]
    assert steps == list(range(50))


# -- 5. a metrics file that is a directory ------------------------------------------------


def test_a_metrics_file_that_is_a_directory_is_refused_by_name(tmp_path: Path) -> None:
    with pytest.raises(
        ConfigError, match=r"is a directory; give metrics_file \(DANLU_METRICS_FILE\)"
    ):
        MetricsReporter(path=tmp_path)
    environ = {"DANLU_METRICS_FILE": str(tmp_path)}
    model = torch.nn.Linear(2, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(ConfigError, match="is a directory"):
        dt.init(model, optimizer, global_batch_size=4, environ=environ, progress=False)
    with pytest.raises(ConfigError, match="is a directory"):
        dt.init(model, optimizer, global_batch_size=4, metrics_file=str(tmp_path), environ={})


def test_a_metrics_file_path_is_taken_as_before(tmp_path: Path) -> None:
    path = tmp_path / "runs" / "metrics.jsonl"  # its directory made at the first write
    reporter = MetricsReporter(path=path)
    reporter.report({"step": 1, "loss": 0.5})
    reporter.flush()
    assert [json.loads(line) for line in path.read_text().splitlines()] == [
        {"step": 1, "loss": 0.5}
    ]


# -- 6. DANLU_API_URL ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "url",
    [
        "http://cp:8000/danlu?tenant=a",
        "http://cp:8000/#metrics",
        "http://cp:8000?",
    ],
)
def test_an_api_url_with_a_query_or_fragment_is_refused_by_name(url: str) -> None:
    with pytest.raises(ConfigError, match=r"DANLU_API_URL.*query or fragment"):
        JobEnv.from_environ({"DANLU_API_URL": url, "DANLU_JOB_ID": "j"})


def test_an_api_url_with_a_password_is_refused_without_showing_it() -> None:
    with pytest.raises(ConfigError, match=r"DANLU_API_URL.*DANLU_TOKEN") as caught:
        JobEnv.from_environ({"DANLU_API_URL": "http://me:s3cret@cp:8000", "DANLU_JOB_ID": "j"})
    assert "s3cret" not in str(caught.value)


@pytest.mark.parametrize(
    ("url", "metrics_url"),
    [
        ("http://cp:8000", "http://cp:8000/api/v1/jobs/j/metrics"),
        ("https://cp/danlu/", "https://cp/danlu/api/v1/jobs/j/metrics"),
        ("http://[::1]:8000/", "http://[::1]:8000/api/v1/jobs/j/metrics"),
    ],
)
def test_an_api_url_without_them_is_taken_as_before(url: str, metrics_url: str) -> None:
    env = JobEnv.from_environ({"DANLU_API_URL": url, "DANLU_JOB_ID": "j"})
    assert env.metrics_url == metrics_url


# -- 7. an adaptive batch's bounds --------------------------------------------------------


@pytest.mark.parametrize("mode", ["schedule", "gns", "goodput"])
def test_an_adaptive_max_batch_below_b0_is_refused_by_name(mode: str) -> None:
    with pytest.raises(ConfigError, match=r"max_batch \(32\) must be >= b0 \(64\)"):
        AdaptiveBatch(mode, 64, total_steps=100, max_batch=32)
    with pytest.raises(ConfigError, match="max_batch"):
        PowerSchedule(64, 100, max_batch=32)


def test_an_adaptive_max_batch_of_b0_or_more_is_taken_as_before() -> None:
    assert AdaptiveBatch("gns", 32, max_batch=32).max_batch == 32
    schedule = AdaptiveBatch("schedule", 16, total_steps=4, alpha=1.0, max_batch=64)
    assert [schedule.target(step, 16) for step in (0, 4, 12, 100)] == [16, 32, 64, 64]


# -- 8. the number of epochs --------------------------------------------------------------


def _context(tmp_path: Path) -> Any:
    model = torch.nn.Linear(2, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    return dt.init(
        model,
        optimizer,
        global_batch_size=4,
        dataset_size=8,
        metrics_file=str(tmp_path / "m.jsonl"),
        progress=False,
        environ={},
    )


@pytest.mark.parametrize("epochs", ["3", 2.5, True, -1])
def test_an_epoch_count_that_is_no_whole_number_is_refused_by_name(
    tmp_path: Path, epochs: Any
) -> None:
    with _context(tmp_path) as ctx, pytest.raises(ConfigError, match="epochs"):
        next(iter(ctx.epochs(epochs)))
    data = torch.utils.data.TensorDataset(torch.randn(8, 2), torch.randn(8, 1))
    with pytest.raises(ConfigError, match="epochs"):
        dt.fit(
            torch.nn.Linear(2, 1),
            torch.optim.SGD(torch.nn.Linear(2, 1).parameters(), lr=0.1),
            data,
            lambda model, batch: torch.nn.functional.mse_loss(model(batch[0]), batch[1]),
            epochs=epochs,
            global_batch_size=4,
            metrics_file=str(tmp_path / "fit.jsonl"),
            progress=False,
            environ={},
        )


def test_an_epoch_count_that_is_a_whole_number_is_taken_as_before(tmp_path: Path) -> None:
    with _context(tmp_path) as ctx:
        seen = []
        for epoch in ctx.epochs(np.int64(2)):
            seen.append(epoch)
            for _ in ctx.batches(torch.zeros(8, 2)):
                pass
        assert seen == [0, 1]
        assert list(ctx.epochs(0)) == []


# -- 9. init's switches -------------------------------------------------------------------


@pytest.mark.parametrize("switch", ["resume", "async_checkpoint", "incremental_checkpoint"])
def test_an_init_switch_that_is_no_bool_is_refused_by_name(tmp_path: Path, switch: str) -> None:
    model = torch.nn.Linear(2, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(ConfigError, match=f"{switch} must be True or False"):
        dt.init(
            model,
            optimizer,
            global_batch_size=4,
            checkpoint_dir=str(tmp_path / "ckpt"),
            metrics_file=str(tmp_path / "m.jsonl"),
            progress=False,
            environ={},
            **{switch: "no"},
        )


def test_resume_false_as_0_is_taken_as_before(tmp_path: Path) -> None:
    def run(resume: Any) -> int:
        model = torch.nn.Linear(2, 1)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        with dt.init(
            model,
            optimizer,
            global_batch_size=4,
            checkpoint_dir=str(tmp_path / "ckpt"),
            metrics_file=str(tmp_path / "m.jsonl"),
            progress=False,
            environ={},
            resume=resume,
        ) as ctx:
            step = ctx.step_num
            ctx.step((torch.randn(4, 2), torch.randn(4, 1)), _mse)
            ctx.save()
            return step

    assert run(True) == 0
    assert run(1) == 1  # resumed from the checkpoint of step 1
    assert run(0) == 0  # started afresh


def _mse(model: torch.nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    return torch.nn.functional.mse_loss(model(batch[0]), batch[1])


# -- 10. a sharded checkpoint's files are hashed in chunks ---------------------------------


def test_sharded_files_are_checksummed_without_reading_one_whole(tmp_path: Path) -> None:
    shard = 32 << 20  # a rank's shards: gigabytes in a real run
    mgr = CheckpointManager(str(tmp_path), sharded=True)
    name = "ckpt-000000000001-0123abcd"
    (tmp_path / name).mkdir()
    payload = np.random.default_rng(0).integers(0, 256, shard, dtype=np.uint8).tobytes()
    (tmp_path / name / "__0_0.distcp").write_bytes(payload)
    (tmp_path / name / ".metadata").write_bytes(b"not a pickle")
    (tmp_path / name / "skeleton.json").write_bytes(b"{}")
    del payload
    written = ["__0_0.distcp", ".metadata", "skeleton.json"]
    importlib.import_module("torch.distributed.checkpoint.filesystem")  # its import's memory
    tracemalloc.start()
    try:
        assert mgr._commit_shards(name, 1, written, {}) is None
        committed_peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.reset_peak()
        with pytest.raises(DataError, match="not a DCP metadata file"):  # checksums passed
            mgr.load(name)
        load_peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert committed_peak < shard // 2 and load_peak < shard // 2
    files = _manifest(tmp_path)["files"]
    data = (tmp_path / name / "__0_0.distcp").read_bytes()
    assert files["__0_0.distcp"] == {"size": shard, "sha256": hashlib.sha256(data).hexdigest()}
    (tmp_path / name / "__0_0.distcp").write_bytes(data[:-1] + bytes([data[-1] ^ 1]))
    with pytest.raises(DataError, match="checksum does not match"):
        CheckpointManager(str(tmp_path), sharded=True).load(name)
