"""CheckpointManager and capture_state/restore_state: formats, atomicity, retention,
incremental deltas, async saves."""

from __future__ import annotations

import json
import math
import random
import threading
import time
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from danlu.core.errors import ConfigError, DataError  # noqa: E402
from danlu.train.checkpoint import CheckpointManager, codec, snapshot  # noqa: E402
from danlu.train.state import capture_rng_state, capture_state, restore_state  # noqa: E402


def _setup(seed: int = 0) -> tuple:
    torch.manual_seed(seed)
    model = torch.nn.Sequential(
        torch.nn.Linear(6, 8), torch.nn.BatchNorm1d(8), torch.nn.Linear(8, 2)
    )
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    sched = torch.optim.lr_scheduler.ReduceLROnPlateau(opt)
    scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
    return model, opt, sched, scaler


def _train(model, opt, steps: int = 3) -> None:
    for _ in range(steps):
        loss = model(torch.randn(4, 6)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()


def _equal_trees(a, b) -> bool:
    if isinstance(a, torch.Tensor):
        return (
            isinstance(b, torch.Tensor)
            and a.dtype == b.dtype
            and a.shape == b.shape
            and torch.equal(codec.bits(a), codec.bits(b))
        )
    if isinstance(a, dict):
        return (
            isinstance(b, dict)
            and a.keys() == b.keys()
            and all(_equal_trees(a[k], b[k]) for k in a)
        )
    if isinstance(a, list | tuple):
        return (
            type(a) is type(b)
            and len(a) == len(b)
            and all(_equal_trees(x, y) for x, y in zip(a, b, strict=True))
        )
    if isinstance(a, float) and math.isnan(a):
        return isinstance(b, float) and math.isnan(b)
    if isinstance(a, np.ndarray):
        return isinstance(b, np.ndarray) and np.array_equal(a, b)
    return a == b and type(a) is type(b)


def test_capture_restore_roundtrip_through_disk(tmp_path: Path) -> None:
    model, opt, sched, scaler = _setup()
    _train(model, opt)
    sched.step(1.0)
    random.random()
    np.random.rand()
    extra = {
        "nan": float("nan"),
        "inf": -math.inf,
        3: "int key",
        "t": (1, 2.5, None),
        "arr": np.arange(4),
        "dtype": torch.bfloat16,
        "neg0": torch.tensor([-0.0]),
    }
    state = capture_state(
        model,
        opt,
        sched,
        scaler,
        data_state={"epoch": 2, "offset": 32},
        step=7,
        metrics_history=[{"loss": 0.5}],
        extra=extra,
    )
    mgr = CheckpointManager(str(tmp_path))
    mgr.save(7, state, {"loss": 0.5})
    expect = (random.random(), float(np.random.rand()), float(torch.rand(1)))

    step, loaded = CheckpointManager(str(tmp_path)).load_latest()  # type: ignore[misc]
    assert step == 7
    assert _equal_trees(dict(state), loaded)
    m2, o2, s2, sc2 = _setup(seed=1)
    info = restore_state(loaded, m2, o2, s2, sc2)
    assert (info.step, info.data_state, info.metrics_history) == (
        7,
        {"epoch": 2, "offset": 32},
        [{"loss": 0.5}],
    )
    assert (random.random(), float(np.random.rand()), float(torch.rand(1))) == expect
    for a, b in zip(model.state_dict().values(), m2.state_dict().values(), strict=True):
        assert torch.equal(a, b)
    assert sc2.get_scale() == 1024.0 and s2.state_dict() == sched.state_dict()
    # the tensor file loads with weights_only=True on its own
    (ckpt,) = tmp_path.iterdir()
    assert torch.load(ckpt / "tensors.pt", weights_only=True)


def test_each_rank_restores_its_own_rng_states_and_a_resized_run_rank_0s(
    tmp_path: Path,
) -> None:
    """A distributed checkpoint holds every rank's RNG states (``rng_ranks``): rank r of the
    same world size restores the r-th; at another world size, or from a checkpoint without
    them (written before), every rank restores the chief's (``rng``)."""
    model, *_ = _setup()
    per_rank = []
    for rank in range(3):
        torch.manual_seed(100 + rank)
        per_rank.append(capture_rng_state())
    torch.manual_seed(100)
    mgr = CheckpointManager(str(tmp_path), keep_last=2)
    mgr.save(1, capture_state(model, step=1, rng_ranks=per_rank))
    mgr.save(2, capture_state(model, step=2))  # one process: no per-rank states
    with_ranks = mgr.load(mgr.list_checkpoints()[0].name)[1]
    without = mgr.load(mgr.list_checkpoints()[1].name)[1]

    def draws_after(state: dict, rank: int, world_size: int) -> list[float]:
        torch.manual_seed(7)
        restore_state(state, model, rank=rank, world_size=world_size)
        return torch.rand(3).tolist()

    def seeded(seed: int) -> list[float]:
        torch.manual_seed(seed)
        return torch.rand(3).tolist()

    assert [draws_after(with_ranks, r, 3) for r in range(3)] == [seeded(100 + r) for r in range(3)]
    assert draws_after(with_ranks, 1, 2) == seeded(100)  # resized: the chief's
    assert draws_after(without, 2, 3) == seeded(100)


def test_capture_copies_and_restore_checks() -> None:
    model, opt, *_ = _setup()
    state = capture_state(model, opt)
    with torch.no_grad():
        model[0].weight.add_(1.0)
    assert not torch.equal(state["model"]["0.weight"], model[0].weight)
    with pytest.raises(DataError, match="scheduler"):
        restore_state(state, model, opt, scheduler=torch.optim.lr_scheduler.StepLR(opt, 1))
    with pytest.raises(DataError):
        restore_state({"nope": 1}, model)


def test_unsupported_value_is_rejected(tmp_path: Path) -> None:
    model, *_ = _setup()
    state = capture_state(model, extra={"fn": object()})
    with pytest.raises(DataError, match="extra/fn"):
        CheckpointManager(str(tmp_path)).save(1, state)


def test_partial_and_corrupt_checkpoints_are_skipped(tmp_path: Path) -> None:
    model, opt, *_ = _setup()
    mgr = CheckpointManager(str(tmp_path), keep_last=5)
    assert mgr.load_latest() is None
    for step in (1, 2, 3):
        _train(model, opt, 1)
        mgr.save(step, capture_state(model, opt, step=step))
    names = sorted(p.name for p in tmp_path.iterdir())
    (tmp_path / names[2] / "MANIFEST.json").unlink()  # step 3: cut before its manifest
    tensors = tmp_path / names[1] / "tensors.pt"  # step 2: bit rot
    data = bytearray(tensors.read_bytes())
    data[-100] ^= 0xFF
    tensors.write_bytes(bytes(data))
    fresh = CheckpointManager(str(tmp_path))
    step, _ = fresh.load_latest()  # type: ignore[misc]
    assert step == 1
    with pytest.raises(DataError, match=str(tensors)):
        fresh.load(names[1])


@pytest.mark.parametrize("entry", [{}, "x", {"size": "12", "sha256": "ab"}, None])
def test_a_manifest_with_a_malformed_file_entry_is_skipped(tmp_path: Path, entry: object) -> None:
    """A damaged manifest that still parses as JSON falls back to the previous checkpoint
    (a file entry without its size or checksum escaped load_latest as a KeyError)."""
    model, opt, *_ = _setup()
    mgr = CheckpointManager(str(tmp_path), keep_last=5)
    for step in (1, 2):
        _train(model, opt, 1)
        mgr.save(step, capture_state(model, opt, step=step))
    manifest = tmp_path / sorted(p.name for p in tmp_path.iterdir())[1] / "MANIFEST.json"
    data = json.loads(manifest.read_text())
    data["files"]["meta.json"] = entry
    manifest.write_text(json.dumps(data))
    step, _ = CheckpointManager(str(tmp_path)).load_latest()  # type: ignore[misc]
    assert step == 1


def test_load_latest_resumes_the_last_commit_not_the_highest_step(tmp_path: Path) -> None:
    model, *_ = _setup()
    CheckpointManager(str(tmp_path), keep_last=5).save(500, capture_state(model, step=500))
    again = CheckpointManager(str(tmp_path), keep_last=5)  # a run started afresh there
    for step in (100, 200):
        again.save(step, capture_state(model, step=step))
    step, _ = CheckpointManager(str(tmp_path)).load_latest()  # type: ignore[misc]
    assert step == 200


class _ClockBehind:
    """The ``time`` module of a node whose wall clock is a minute behind."""

    def __getattr__(self, name: str) -> object:
        return getattr(time, name)

    @staticmethod
    def time_ns() -> int:
        return time.time_ns() - 60 * 10**9


def test_a_node_whose_clock_is_behind_still_commits_after_the_checkpoints_there(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Commit order was the wall clock of each commit: a run relaunched on a node whose
    clock is behind wrote steps 6..12 "before" steps 2 and 4, so retention deleted them as
    it wrote them and the next restart resumed from step 4, not 12."""
    from danlu.train.checkpoint import manager

    model, *_ = _setup()
    first = CheckpointManager(str(tmp_path), keep_last=3)
    for step in (2, 4):
        first.save(step, capture_state(model, step=step))
    monkeypatch.setattr(manager, "time", _ClockBehind())
    relaunched = CheckpointManager(str(tmp_path), keep_last=3)
    assert relaunched.load_latest()[0] == 4  # type: ignore[index]
    for step in (6, 8, 10, 12):
        relaunched.save(step, capture_state(model, step=step))
    assert [c.step for c in relaunched.list_checkpoints()] == [8, 10, 12]
    monkeypatch.undo()
    step, _ = CheckpointManager(str(tmp_path)).load_latest()  # type: ignore[misc]
    assert step == 12


def test_retention_keeps_last_and_best(tmp_path: Path) -> None:
    model, *_ = _setup()
    mgr = CheckpointManager(str(tmp_path), keep_last=2, keep_best=2, best_metric="acc", mode="max")
    accs = [0.1, 0.9, 0.3, 0.8, 0.2, 0.4]
    for step, acc in enumerate(accs, 1):
        mgr.save(step, capture_state(model, step=step), {"acc": acc})
    kept = [c.step for c in mgr.list_checkpoints()]
    assert kept == [2, 4, 5, 6]
    with pytest.raises(ConfigError):
        CheckpointManager(str(tmp_path), keep_last=0)


def test_should_save_by_steps_and_seconds(tmp_path: Path) -> None:
    model, *_ = _setup()
    by_steps = CheckpointManager(str(tmp_path / "a"), every_steps=5)
    assert [s for s in range(1, 16) if by_steps.should_save(s)] == [5, 10, 15]
    by_steps.save(10, capture_state(model, step=10))
    assert not by_steps.should_save(10)
    assert not CheckpointManager(str(tmp_path / "b")).should_save(100)
    by_time = CheckpointManager(str(tmp_path / "c"), every_seconds=60)
    t0 = by_time._last_time
    assert not by_time.should_save(1, now=t0 + 59)
    assert by_time.should_save(1, now=t0 + 61)


def _finetune_state(step: int, base_seed: int = 0) -> dict:
    """A 'model' in which only the head (~10% of the elements) changes between steps."""
    g = torch.Generator().manual_seed(base_seed)
    body = {f"body{i}": torch.randn(64, 64, generator=g) for i in range(9)}
    head = torch.randn(64, 64, generator=g) + step * 1e-3
    return {"model": {**body, "head": head}, "step": step}


def test_incremental_is_smaller_and_restores_exactly(tmp_path: Path) -> None:
    mgr = CheckpointManager(str(tmp_path), incremental=True, full_every=3, keep_last=10)
    states = []
    for step in range(1, 8):
        state = _finetune_state(step)
        if step == 5:  # sparse change inside a tensor, and signed zero
            state["model"]["body0"][0, :3] = torch.tensor([1.0, -0.0, float("nan")])
        states.append(state)
        mgr.save(step, state)
    infos = mgr.list_checkpoints()
    assert [i.kind for i in infos] == ["full", "incremental", "incremental"] * 2 + ["full"]
    full, inc = infos[0].size, infos[1].size
    assert inc < 0.2 * full
    assert all(
        i.base == infos[3 * (n // 3)].name for n, i in enumerate(infos) if i.kind == "incremental"
    )
    meta = json.loads((tmp_path / infos[4].name / "meta.json").read_bytes())
    assert meta["layout"]["model/body1"] == "base"
    assert meta["layout"]["model/body0"]["delta"]["nnz"] == 3  # only the changed elements
    assert "delta" in meta["layout"]["model/head"]
    fresh = CheckpointManager(str(tmp_path))
    for info, state in zip(infos, states, strict=True):
        step, loaded = fresh.load(info.name)
        assert step == info.step and _equal_trees(state, loaded)


def test_a_state_key_named_like_a_delta_round_trips(tmp_path: Path) -> None:
    """``w``'s delta is stored as ``w::delta``: a tensor of the state with that name, stored
    whole, overwrote it (the checkpoint then verified but could not be loaded)."""
    mgr = CheckpointManager(str(tmp_path), incremental=True)
    first = {"w": torch.zeros(1000), "w::delta": torch.ones(7)}
    mgr.save(1, first)
    second = {"w": first["w"].clone(), "w::delta": torch.ones(8)}  # new shape: stored whole
    second["w"][3] = 5.0
    mgr.save(2, second)
    assert mgr.list_checkpoints()[-1].kind == "incremental"
    step, loaded = CheckpointManager(str(tmp_path)).load_latest()  # type: ignore[misc]
    assert step == 2 and _equal_trees(second, loaded)


def test_incremental_base_corruption_falls_back(tmp_path: Path) -> None:
    mgr = CheckpointManager(str(tmp_path), incremental=True, full_every=3, keep_last=10)
    for step in range(1, 6):
        mgr.save(step, _finetune_state(step))
    infos = mgr.list_checkpoints()  # full, inc, inc, full, inc
    (tmp_path / infos[3].name / "tensors.pt").write_bytes(b"")  # base of step 5
    step, loaded = CheckpointManager(str(tmp_path)).load_latest()  # type: ignore[misc]
    assert step == 3 and _equal_trees(_finetune_state(3), loaded)


def test_async_snapshot_is_taken_at_save_time(tmp_path: Path) -> None:
    model, opt, *_ = _setup()
    mgr = CheckpointManager(str(tmp_path), async_save=True, incremental=True)
    for step in range(1, 4):
        live = {"model": model.state_dict(), "optimizer": opt.state_dict(), "step": step}
        expected = {k: v.clone() for k, v in model.state_dict().items()}
        mgr.save(step, live)  # a plain dict: copied into host buffers before returning
        _train(model, opt, 1)  # mutates the live tensors while the save is in flight
        mgr.wait()
        _, loaded = mgr.load_latest()  # type: ignore[misc]
        assert all(torch.equal(loaded["model"][k], v) for k, v in expected.items())
    mgr.close()
    with pytest.raises(ConfigError):
        mgr.save(9, {"step": 9})


def test_capture_without_copy_shares_parameters_and_copies_buffers() -> None:
    model, opt, *_ = _setup()
    _train(model, opt, 1)
    state = capture_state(model, opt, copy=False)
    assert state["model"]["0.weight"].data_ptr() == model[0].weight.data_ptr()
    assert state["model"]["1.running_mean"].data_ptr() != model[1].running_mean.data_ptr()
    assert torch.equal(state["model"]["1.running_mean"], model[1].running_mean)
    exp_avg = opt.state[model[0].weight]["exp_avg"]
    assert state["optimizer"]["state"][0]["exp_avg"].data_ptr() == exp_avg.data_ptr()
    assert state.guards == (opt,) and not state.owned
    assert capture_state(model, copy=False).guards == ()  # no optimizer: nothing guards


def test_deferred_async_snapshot_equals_a_sync_save_at_the_same_step(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The async save copies live tensors in the background, during the next forward and
    backward; the next opt.step() must wait for the copy. The copy is held until that
    step starts, so training (BatchNorm buffers in the forward, then the step) really runs
    while the snapshot is pending; the checkpoint must still be bit-identical to a
    synchronous save taken at the same step."""
    model, opt, *_ = _setup()
    _train(model, opt, 3)
    sync = CheckpointManager(str(tmp_path / "sync"))
    sync.save(3, capture_state(model, opt, step=3))  # copies, persisted before returning

    release, order = threading.Event(), []
    real_copyto = snapshot.np.copyto

    def held_copyto(dst: np.ndarray, src: np.ndarray) -> None:
        assert release.wait(30), "the next optimizer step never started"
        real_copyto(dst, src)
        order.append("copy")

    monkeypatch.setattr(snapshot.np, "copyto", held_copyto)
    opt.register_step_pre_hook(lambda *_: release.set())  # runs before the manager's hook
    mgr = CheckpointManager(str(tmp_path / "async"), async_save=True)
    mgr.save(3, capture_state(model, opt, step=3, copy=False))
    assert mgr.snapshot_pending  # deferred: nothing copied yet
    opt.register_step_pre_hook(lambda *_: order.append("step"))  # after the manager's hook
    _train(model, opt, 2)
    assert order.index("step") == order.count("copy") > 0  # every copy before the 1st step
    mgr.close()

    _, expected = CheckpointManager(str(tmp_path / "sync")).load_latest()  # type: ignore[misc]
    _, got = CheckpointManager(str(tmp_path / "async")).load_latest()  # type: ignore[misc]
    assert _equal_trees(expected, got)
    assert not torch.equal(got["model"]["0.weight"], model[0].weight)  # training went on
    assert not torch.equal(got["model"]["1.running_mean"], model[1].running_mean)


def test_async_error_is_raised_by_wait(tmp_path: Path) -> None:
    target = tmp_path / "file"
    target.write_text("not a directory")
    mgr = CheckpointManager(str(tmp_path), async_save=True)
    mgr.storage.root = str(target)  # make the background write fail
    mgr.save(1, {"x": torch.ones(2)})
    with pytest.raises(OSError):
        mgr.wait()
    mgr.wait()  # reported once


def test_a_save_the_disk_has_no_room_for_leaves_nothing_behind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The disk fills during a save (ENOSPC from fsync, as delayed allocation reports it):
    the save raises with a note naming the directory and what it keeps, and its partial
    files are gone; they used to stay, so that every later save failed too."""
    import errno
    import os

    model, opt, _, _ = _setup()
    mgr = CheckpointManager(str(tmp_path), keep_last=2)
    mgr.save(1, capture_state(model, opt, step=1))
    before = sorted(p for p in tmp_path.rglob("*") if p.is_file())

    def full(fd: int) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(OSError) as info:
        mgr.save(2, capture_state(model, opt, step=2))
    assert info.value.errno == errno.ENOSPC
    (note,) = info.value.__notes__
    assert note.startswith(f"checkpoint of step 2 not saved: no space left in {tmp_path}")
    assert "1 checkpoint(s) kept stay (keep_last=2)" in note
    assert sorted(p for p in tmp_path.rglob("*") if p.is_file()) == before
    monkeypatch.undo()

    _train(model, opt)
    mgr.save(3, capture_state(model, opt, step=3))
    loaded = CheckpointManager(str(tmp_path)).load_latest()
    assert loaded is not None and loaded[0] == 3


def test_a_new_optimizer_at_a_freed_optimizers_address_is_guarded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The step pre-hooks were keyed by ``id(optimizer)`` and never dropped: a new optimizer
    that CPython placed at a freed one's address was never hooked, so its next step did not
    wait for the deferred copy and the checkpoint held the weights of the step after."""
    model, *_ = _setup()
    mgr = CheckpointManager(str(tmp_path), async_save=True)
    new = None
    for _ in range(100):  # CPython reuses a freed object's address for the next of its size
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        _train(model, opt, 1)
        mgr.save(1, capture_state(model, opt, step=1, copy=False))
        mgr.wait()
        old_id = id(opt)
        del opt  # freed at once (no gc.collect(): it would allocate in between)
        candidate = torch.optim.SGD(model.parameters(), lr=0.1)
        if id(candidate) == old_id:
            new = candidate
            break
        del candidate
    if new is None:
        pytest.skip("no optimizer address was reused")
    _train(model, new, 1)

    release, order = threading.Event(), []
    real_copyto = snapshot.np.copyto

    def held_copyto(dst: np.ndarray, src: np.ndarray) -> None:
        assert release.wait(30), "the next optimizer step never started"
        real_copyto(dst, src)
        order.append("copy")

    monkeypatch.setattr(snapshot.np, "copyto", held_copyto)
    new.register_step_pre_hook(lambda *_: release.set())  # runs before the manager's hook
    hooks = len(new._optimizer_step_pre_hooks)
    expected = {k: v.clone() for k, v in model.state_dict().items()}
    mgr.save(2, capture_state(model, new, step=2, copy=False))
    assert len(new._optimizer_step_pre_hooks) == hooks + 1  # the manager's
    new.register_step_pre_hook(lambda *_: order.append("step"))  # after the manager's hook
    _train(model, new, 1)
    assert order.index("step") == order.count("copy") > 0  # every copy before the step
    mgr.close()
    monkeypatch.undo()
    _, got = CheckpointManager(str(tmp_path)).load_latest()  # type: ignore[misc]
    assert all(torch.equal(got["model"][k], v) for k, v in expected.items())
