"""CheckpointManager against directories it cannot trust: retention after a fallback or in an
older run's directory, metrics that do not rank, manifests naming paths outside their
checkpoint, and sharded checkpoints whose DCP metadata (a pickle) is hostile."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import pickle
import shutil
import time
import warnings
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from danlu.train.checkpoint import CheckpointManager, codec  # noqa: E402
from danlu.train.checkpoint import manager as manager_module  # noqa: E402

FORMAT = "danlu.checkpoint/1"


def _w(value: float) -> dict[str, Any]:
    return {"w": torch.full((4,), float(value))}


def _dir_of(root: Path, step: int) -> Path:
    (found,) = root.glob(f"ckpt-{step:012d}-*")
    return found


def _corrupt(ckpt: Path) -> None:
    """Bit rot in the checkpoint's tensors: its manifest no longer matches."""
    data = bytearray((ckpt / "tensors.pt").read_bytes())
    data[-100] ^= 0xFF
    (ckpt / "tensors.pt").write_bytes(bytes(data))


def _rewrite_manifest(ckpt: Path, **changes: Any) -> None:
    manifest = json.loads((ckpt / "MANIFEST.json").read_text())
    manifest.update(changes)
    (ckpt / "MANIFEST.json").write_text(json.dumps(manifest))


def _steps(mgr: CheckpointManager) -> list[int]:
    return [i.step for i in mgr.list_checkpoints()]


# -- retention ----------------------------------------------------------------------------
def test_saves_after_falling_back_past_an_invalid_newer_checkpoint_are_kept(
    tmp_path: Path,
) -> None:
    """keep_last counted the highest steps as the newest: after load_latest fell back past
    an unloadable step 300, every new save (steps 210, 220, ...) was deleted by its own
    retention, and the next restart went back to step 200 again."""
    mgr = CheckpointManager(str(tmp_path), keep_last=1, keep_best=1, best_metric="loss")
    for step, loss in ((100, 0.5), (200, 0.1), (300, 0.3)):
        mgr.save(step, _w(step), {"loss": loss})
    mgr.close()
    _corrupt(_dir_of(tmp_path, 300))

    mgr = CheckpointManager(str(tmp_path), keep_last=1, keep_best=1, best_metric="loss")
    assert mgr.load_latest()[0] == 200  # type: ignore[index]
    for step in (210, 220, 230):
        mgr.save(step, _w(step), {"loss": 0.2})
        # the save itself, and the best (step 200); the invalid step 300 is not kept
        assert _steps(mgr) == [200, step]
    mgr.close()
    step, state = CheckpointManager(str(tmp_path)).load_latest()  # type: ignore[misc]
    assert step == 230 and torch.equal(state["w"], _w(230)["w"])


def test_a_fresh_run_in_an_older_runs_directory_keeps_its_own_checkpoints(
    tmp_path: Path,
) -> None:
    """The older run's higher steps used to take every keep_last slot: each checkpoint of
    the new run was deleted as soon as it was written."""
    old = CheckpointManager(str(tmp_path), keep_last=3)
    for step in (800, 900, 1000):
        old.save(step, _w(-1))
    old.close()
    new = CheckpointManager(str(tmp_path), keep_last=3)
    new.save(50, _w(50))
    assert _steps(new) == [50, 900, 1000]  # the newest 3 by commit: 900, 1000, then 50
    for step in (100, 150):
        new.save(step, _w(step))
    assert _steps(new) == [50, 100, 150]
    new.close()
    step, state = CheckpointManager(str(tmp_path)).load_latest()  # type: ignore[misc]
    assert step == 150 and torch.equal(state["w"], _w(150)["w"])


def test_the_checkpoint_just_committed_is_kept_whatever_the_clock_says(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A clock set back (a restart on another node) made the new checkpoint the oldest by
    commit time (retention kept it as the one just saved, and step 10 as the newest). Now a
    commit orders after every checkpoint in the directory whatever the clock says: it is the
    newest, the one ``keep_last=1`` keeps and the one a restart resumes from."""
    mgr = CheckpointManager(str(tmp_path), keep_last=1)
    mgr.save(10, _w(10))
    monkeypatch.setattr(manager_module.time, "time_ns", lambda: 1)
    mgr.save(5, _w(5))
    assert _steps(mgr) == [5]
    assert mgr.load_latest()[0] == 5  # type: ignore[index]


def test_an_incremental_checkpoint_keeps_its_base_under_commit_order_retention(
    tmp_path: Path,
) -> None:
    """keep_last=1 of an incremental run whose steps restart below an older run's: the
    newest checkpoint is incremental and its full base must stay for it to load."""
    old = CheckpointManager(str(tmp_path), keep_last=2)
    for step in (500, 600):
        old.save(step, _w(-1))
    old.close()
    mgr = CheckpointManager(str(tmp_path), keep_last=1, incremental=True, full_every=3)
    states = {}
    for step in (1, 2, 3, 4, 5):
        states[step] = {"w": torch.arange(1000.0)}
        states[step]["w"][0] = step
        mgr.save(step, states[step])
    infos = mgr.list_checkpoints()
    assert [(i.step, i.kind) for i in infos] == [(4, "full"), (5, "incremental")]
    mgr.close()
    step, state = CheckpointManager(str(tmp_path)).load_latest()  # type: ignore[misc]
    assert step == 5 and torch.equal(state["w"], states[5]["w"])


@pytest.mark.parametrize(
    ("mode", "bad"),
    [("min", float("nan")), ("max", float("nan")), ("max", float("inf")), ("min", "low")],
)
def test_a_metric_that_is_no_finite_number_never_ranks_as_best(
    tmp_path: Path, mode: str, bad: Any
) -> None:
    """A NaN loss (a NaN-loss step checkpointed with anomaly detection off) broke the sort:
    the NaN checkpoint stayed 'the best' and the real best was deleted. A value that is no
    number (a hand-edited manifest) raised from save()."""
    mgr = CheckpointManager(
        str(tmp_path),
        keep_last=1,
        keep_best=1,
        best_metric="loss",
        mode=mode,  # type: ignore[arg-type]
    )
    best = 0.1 if mode == "min" else 0.9
    losses = [0.5, best, 0.5, 0.5]
    mgr.save(10, _w(10), {"loss": 0.5})
    _rewrite_manifest(_dir_of(tmp_path, 10), metrics={"loss": bad})
    fresh = CheckpointManager(
        str(tmp_path),
        keep_last=1,
        keep_best=1,
        best_metric="loss",
        mode=mode,  # type: ignore[arg-type]
    )
    for step, loss in zip((20, 30, 40), losses[1:], strict=True):
        fresh.save(step, _w(step), {"loss": loss})
    assert _steps(fresh) == [20, 40]


# -- paths from the manifest --------------------------------------------------------------
def _reads_inside(mgr: CheckpointManager, root: Path, monkeypatch: pytest.MonkeyPatch) -> list:
    """Record every path ``mgr`` reads; return the list (filled as it reads)."""
    read: list[str] = []
    real = mgr.storage.read

    def recording(path: str) -> bytes:
        read.append(os.path.normpath(path))
        return real(path)

    monkeypatch.setattr(mgr.storage, "read", recording)
    return read


@pytest.mark.parametrize("sharded", [False, True])
@pytest.mark.parametrize("fname", ["../../secret.txt", "/etc/hostname", "..", "a/b", "a\\b"])
def test_a_manifest_file_name_that_is_not_a_plain_name_is_skipped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fname: str, sharded: bool
) -> None:
    """The loader read every file a sharded checkpoint's manifest names, joined to the root
    unchecked: ``..`` or an absolute name read files outside the checkpoint directory."""
    root = tmp_path / "ckpts"
    secret = tmp_path / "secret.txt"
    secret.write_text("outside the checkpoint directory")
    mgr = CheckpointManager(str(root), sharded=sharded)
    mgr.save(1, _w(1))
    ckpt = _sharded(root, 2, _w(2)) if sharded else (mgr.save(2, _w(2)), _dir_of(root, 2))[1]
    manifest = json.loads((ckpt / "MANIFEST.json").read_text())
    data = secret.read_bytes()
    manifest["files"][fname] = {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    (ckpt / "MANIFEST.json").write_text(json.dumps(manifest))
    fresh = CheckpointManager(str(root), sharded=sharded)
    read = _reads_inside(fresh, root, monkeypatch)
    assert fresh.load_latest()[0] == 1  # type: ignore[index]
    assert read and all(p.startswith(str(root) + os.sep) for p in read)


def test_an_incremental_base_outside_the_directory_is_not_loaded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An incremental checkpoint's ``base`` was joined to the root unchecked: an absolute
    path (or ``..``) made the loader read another directory's checkpoint as the base."""
    other, root = tmp_path / "other", tmp_path / "ckpts"
    mgr = CheckpointManager(str(other), incremental=True, keep_last=5)
    mgr.save(1, {"w": torch.zeros(1000)})
    second = {"w": torch.zeros(1000)}
    second["w"][7] = 1.0
    mgr.save(2, second)
    mgr.close()
    base_dir, inc_dir = _dir_of(other, 1), _dir_of(other, 2)
    root.mkdir()
    shutil.copytree(inc_dir, root / inc_dir.name)
    for base in (str(base_dir), f"../other/{base_dir.name}", "ckpt-000000000001-gone"):
        _rewrite_manifest(root / inc_dir.name, base=base)
        fresh = CheckpointManager(str(root))
        read = _reads_inside(fresh, root, monkeypatch)
        assert fresh.load_latest() is None
        assert all(p.startswith(str(root) + os.sep) for p in read), base


# -- sharded checkpoints: DCP metadata is a pickle ------------------------------------------
def _touch(path: str) -> None:
    Path(path).touch()


class _Hostile:
    """Unpickled, it creates the file ``marker``."""

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        return (_touch, (self.marker,))


def _sharded(root: Path, step: int, state: dict[str, Any], **replace: bytes) -> Path:
    """A sharded checkpoint as a 1-rank DCP save writes it (``replace``: file contents to
    substitute, e.g. a hostile ``.metadata``), with a manifest that matches its files."""
    from torch.distributed.checkpoint import state_dict_saver

    name = f"ckpt-{step:012d}-0000abcd"
    path = root / name
    skeleton, tensors = codec.encode(state)
    with warnings.catch_warnings():  # DCP warns that it saves in a single process
        warnings.filterwarnings("ignore", message="torch.distributed is disabled")
        state_dict_saver.save(tensors, checkpoint_id=str(path), no_dist=True)
    (path / "skeleton.json").write_text(json.dumps(skeleton))
    for fname, data in replace.items():
        (path / fname).write_bytes(data)
    files = {}
    for f in sorted(path.iterdir()):
        data = f.read_bytes()
        files[f.name] = {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    manifest = {
        "format": FORMAT,
        "name": name,
        "step": step,
        "kind": "sharded",
        "base": None,
        "created_ns": time.time_ns(),  # committed now: newer than the saves before it
        "metrics": {},
        "files": files,
    }
    (path / "MANIFEST.json").write_text(json.dumps(manifest))
    return path


def test_a_sharded_checkpoint_written_by_dcp_loads_in_a_sharded_manager(tmp_path: Path) -> None:
    state = {"w": torch.arange(6.0).reshape(3, 2), "b": torch.ones(2, dtype=torch.bfloat16)}
    _sharded(tmp_path, 3, {**state, "step": 3})
    step, loaded = CheckpointManager(str(tmp_path), sharded=True).load_latest()  # type: ignore[misc]
    assert step == 3 and loaded["step"] == 3
    assert torch.equal(loaded["w"], state["w"]) and torch.equal(loaded["b"], state["b"])


def test_a_hostile_dcp_metadata_pickle_is_never_run(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Loading a sharded checkpoint unpickled DCP's ``.metadata`` (pickle.load): a hostile
    one ran code, and its AttributeError escaped load_latest instead of a fallback."""
    marker = tmp_path / "ran"
    mgr = CheckpointManager(str(tmp_path / "ckpts"), sharded=True)
    mgr.save(1, _w(1))
    _sharded(tmp_path / "ckpts", 2, _w(2), **{".metadata": pickle.dumps(_Hostile(str(marker)))})
    with caplog.at_level(logging.WARNING):
        step, _ = CheckpointManager(str(tmp_path / "ckpts"), sharded=True).load_latest()  # type: ignore[misc]
    assert step == 1 and not marker.exists()
    assert "is not allowed" in caplog.text


def test_dcp_metadata_naming_a_file_outside_the_manifest_is_skipped(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from torch.distributed.checkpoint import filesystem

    mgr = CheckpointManager(str(tmp_path / "ckpts"), sharded=True)
    mgr.save(1, _w(1))
    path = _sharded(tmp_path / "ckpts", 2, _w(2))
    md = filesystem.FileSystemReader(str(path)).read_metadata()  # the test's own: trusted
    for index, info in list(md.storage_data.items()):
        md.storage_data[index] = filesystem._StorageInfo(
            "../../outside.distcp", info.offset, info.length
        )
    _sharded(tmp_path / "ckpts", 3, _w(3), **{".metadata": pickle.dumps(md)})
    with caplog.at_level(logging.WARNING):
        step, _ = CheckpointManager(str(tmp_path / "ckpts"), sharded=True).load_latest()  # type: ignore[misc]
    assert step == 2
    assert "is not a file of the checkpoint" in caplog.text


def test_a_sharded_checkpoint_is_skipped_by_a_manager_that_is_not_sharded(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    mgr = CheckpointManager(str(tmp_path))
    mgr.save(1, _w(1))
    _sharded(tmp_path, 2, _w(2))
    with caplog.at_level(logging.WARNING):
        step, _ = CheckpointManager(str(tmp_path)).load_latest()  # type: ignore[misc]
    assert step == 1
    assert "CheckpointManager(sharded=True)" in caplog.text
