"""OOM recovery findings of review 69.

1. A rollback restored the checkpoint's batch state, and with it forgot the micro-batch limit
   an OOM had taught since: the replay ran out of memory again at the old micro-batch (under
   DDP, in the last backward, fatally), and the records under-counted the OOMs.
2. An OOM retry ran the step again from the random state the failed attempt had left: the
   dropout masks (and any other draw) differed from a run at the smaller micro-batch.
3. The error at the smallest micro-batch did not read as an out-of-memory death to the
   executor's classifier (``danlu.executors.base.classify_exit``): the job was recorded as a
   generic failure.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from train_helpers import SRC, mse_loss, tiny_model, tiny_regression

import danlu.train as dt
from danlu.core.errors import ConfigError
from danlu.executors.base import Outcome, classify_exit
from danlu.train.batch import BatchController
from danlu.train.step import RandomStates


# ---------------------------------------------------------------- 1: rollback keeps the OOM cap
def _rollback_run(tmp_path: Path) -> tuple[dt.TrainContext, list[tuple[int, int]]]:
    """Micro-batches of 16 or more never fit from step 2 on; a checkpoint every 2 steps; the
    first attempt of step 3 (after the OOMs that taught micro-batch 8) has a NaN loss and
    rolls back to step 2's checkpoint, written before any OOM. Returns the context and the
    (step, micro-batch) of every attempt that ran out of memory."""
    data = tiny_regression(n=32 * 6)
    model = tiny_model()
    ooms: list[tuple[int, int]] = []

    def memory_limit(step: int, micro: int) -> bool:
        if step >= 2 and micro >= 16:
            ooms.append((step, micro))
            return True
        return False

    poisoned = [False]

    def loss_fn(m: torch.nn.Module, batch: Any) -> torch.Tensor:
        loss = mse_loss(m, batch)
        if ctx.step_num == 3 and not poisoned[0]:
            poisoned[0] = True
            return loss * float("nan")
        return loss

    ctx = dt.init(
        model,
        torch.optim.SGD(model.parameters(), lr=0.05),
        global_batch_size=32,
        dataset_size=len(data),
        shuffle=False,
        metrics_file=False,
        progress=False,
        oom_injector=memory_limit,
        checkpoint_dir=str(tmp_path),
        checkpoint_every_steps=2,
        anomaly="rollback",
        environ={},
    )
    with ctx:
        for _ in ctx.epochs(1):
            for batch in ctx.batches(data):
                ctx.step(batch, loss_fn)
    return ctx, ooms


def test_a_rollback_keeps_the_micro_batch_an_oom_taught(tmp_path: Path) -> None:
    """Before, the replay went back to micro-batch 32 and ran out of memory twice more (the
    records said 2 OOMs though 4 happened)."""
    ctx, ooms = _rollback_run(tmp_path)
    assert ctx.rollbacks == 1
    assert ooms == [(2, 32), (2, 16)]  # learned once, before the rollback only
    assert (ctx.batch.micro, ctx.batch.oom_cap, ctx.batch.micro_cap) == (8, 8, 8)
    assert ctx.batch.oom_count == 2
    # every record after the rollback trains micro-batches of 8 and counts both OOMs
    replayed = [h for h in ctx.history if h["step"] >= 3]
    assert replayed and {(h["micro_batch"], h["oom_count"]) for h in replayed} == {(8, 2)}


# (case id, live OOM cap before the rollback, the checkpoint's OOM cap, expected cap)
KEEP_CASES = [
    ("learned-since-checkpoint", 4, None, 4),
    ("tighter-than-checkpoint", 2, 8, 2),
    ("checkpoint-tighter", 8, 2, 2),
    ("none-learned", None, None, None),
]


@pytest.mark.parametrize(
    ("live_cap", "saved_cap", "expected"),
    [case[1:] for case in KEEP_CASES],
    ids=[case[0] for case in KEEP_CASES],
)
def test_keep_oom_limit_keeps_the_tighter_cap_and_the_count(
    live_cap: int | None, saved_cap: int | None, expected: int | None
) -> None:
    """The controller's side of a rollback: after the checkpoint's state is loaded, the
    tighter of the two OOM caps limits the micro-batch, and no OOM is forgotten."""
    saved = BatchController(32)
    if saved_cap is not None:
        saved.micro = saved.micro_cap = saved.oom_cap = saved_cap
        saved.oom_count = 1
    batch = BatchController(32)
    batch.load_state_dict(saved.state_dict())
    batch.keep_oom_limit(live_cap, 3)
    assert batch.oom_cap == expected
    assert batch.micro == batch.micro_cap == (32 if expected is None else expected)
    assert batch.oom_count == 3
    assert batch.follows_local == (expected is None)


# ---------------------------------------------------------------- 2: the retry's random state
def _dropout_run(oom: bool) -> tuple[torch.nn.Module, list[float], list[object]]:
    """Global batch 16 with dropout, micro-batch 8, whose loss also draws from Python's
    ``random`` and NumPy's global generator. With ``oom``, the second micro-batch of step 2
    runs out of memory (the first one's forward has drawn its dropout mask); without, the
    run switches to micro-batch 4 at step 2 itself. Returns the model, the losses and the
    generators' states at the end."""
    data = tiny_regression(n=16 * 5)
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(8, 16), torch.nn.Dropout(0.5), torch.nn.Linear(16, 1)
    )
    forwards = [0]

    def injector(step: int, micro: int) -> bool:
        if oom and step == 2 and micro == 8:
            forwards[0] += 1
            return forwards[0] == 2
        return False

    def loss_fn(m: torch.nn.Module, batch: Any) -> torch.Tensor:
        jitter = 1.0 + 1e-3 * (random.random() + float(np.random.random()))
        return mse_loss(m, batch) * jitter

    ctx = dt.init(
        model,
        torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9),
        global_batch_size=16,
        micro_batch_size=8,
        dataset_size=len(data),
        shuffle=False,
        metrics_file=False,
        progress=False,
        oom_injector=injector,
        environ={},
    )
    torch.manual_seed(123)
    random.seed(123)
    np.random.seed(123)
    losses = []
    with ctx:
        for _ in ctx.epochs(1):
            for batch in ctx.batches(data):
                if not oom and ctx.step_num == 2:
                    ctx.batch.micro = ctx.batch.micro_cap = 4
                losses.append(ctx.step(batch, loss_fn).loss)
        assert ctx.batch.oom_count == (1 if oom else 0)
        assert ctx.batch.micro == 4
    states = [torch.get_rng_state(), random.getstate(), np.random.get_state()[1]]
    return model, losses, states


def test_an_oom_retry_starts_from_the_random_state_of_the_step() -> None:
    """Before, the retry drew new dropout masks from where the failed attempt had left the
    generator: the losses, parameters and generator state parted from a run at the smaller
    micro-batch."""
    model, losses, states = _dropout_run(oom=True)
    ref_model, ref_losses, ref_states = _dropout_run(oom=False)
    assert losses == ref_losses
    for p, q in zip(model.parameters(), ref_model.parameters(), strict=True):
        assert torch.equal(p, q)
    assert torch.equal(states[0], ref_states[0])  # type: ignore[arg-type]
    assert states[1] == ref_states[1]
    assert np.array_equal(states[2], ref_states[2])  # type: ignore[arg-type]


def test_the_cuda_generator_of_the_training_device_is_put_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """On a GPU the CUDA generator of the training device is saved and restored too (faked
    here: the test machine may have no GPU), and so are the host generators."""
    calls: list[tuple[str, object]] = []
    saved = torch.tensor([1, 2, 3], dtype=torch.uint8)

    def get_state(device: object) -> torch.Tensor:
        calls.append(("get", device))
        return saved

    def set_state(state: torch.Tensor, device: object) -> None:
        calls.append(("set", device))
        assert state is saved

    monkeypatch.setattr(torch.cuda, "get_rng_state", get_state)
    monkeypatch.setattr(torch.cuda, "set_rng_state", set_state)
    device = torch.device("cuda", 1)
    states = RandomStates(device)
    states.save(host=True)
    first = (torch.rand(3), random.random(), float(np.random.random()))
    states.restore()
    assert torch.equal(torch.rand(3), first[0])
    assert (random.random(), float(np.random.random())) == first[1:]
    assert calls == [("get", device), ("set", device)]


# ---------------------------------------------------------------- 3: the floor reads as an OOM
_FLOOR_SCRIPT = """
import torch
import danlu.train as dt

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
ctx = dt.init(model, torch.optim.SGD(model.parameters(), lr=0.05), global_batch_size=4,
              metrics_file=False, progress=False, environ={},
              oom_injector=dt.inject_oom_at(1, times=10**6))
x, y = torch.randn(4, 8), torch.randn(4, 1)
with ctx:
    ctx.step((x, y), lambda m, b: torch.nn.functional.mse_loss(m(b[0]), b[1]))
"""


def test_out_of_memory_at_the_smallest_micro_batch_is_classified_as_oom(tmp_path: Path) -> None:
    """Before, the log ended with a plain ``ConfigError``: the executor recorded "failed
    (exit code 1)" instead of "out of memory". It is the guard's verdict that the job cannot
    fit its memory (``Outcome.CANNOT_FIT``: no restart), not an OOM a restart may get past."""
    script = tmp_path / "floor.py"
    script.write_text(_FLOOR_SCRIPT)
    path = os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")])
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=path)
    done = subprocess.run(
        [sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=120
    )
    tail = (done.stdout + done.stderr)[-4000:]
    assert done.returncode == 1, tail
    assert classify_exit(done.returncode, tail, None) is Outcome.CANNOT_FIT, tail
    last = tail.strip().splitlines()[-1]
    assert "out of memory even at micro-batch 1" in last  # which micro-batch
    assert "resources.gpu_memory" in last and "DANLU_GPU_MEMORY_LIMIT" in last  # what to do


def test_the_floor_error_is_a_config_error_caused_by_the_oom() -> None:
    model = tiny_model()
    ctx = dt.init(
        model,
        torch.optim.SGD(model.parameters(), lr=0.05),
        global_batch_size=4,
        metrics_file=False,
        progress=False,
        oom_injector=dt.inject_oom_at(1, times=10**6),
        environ={},
    )
    x, y = torch.randn(4, 8), torch.randn(4, 1)
    with ctx, pytest.raises(ConfigError, match="out of memory even at micro-batch 1") as info:
        ctx.step((x, y), mse_loss)
    cause = info.value.__cause__
    assert isinstance(cause, torch.OutOfMemoryError)
    assert "injected OOM at micro-batch 1" in str(cause)
    assert cause.__traceback__ is None  # the failed attempt's frames were let go
    assert ctx.batch.oom_count == 2  # 4 -> 2 -> 1, then the floor
