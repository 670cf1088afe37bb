"""Shared helpers for danlu.train tests: tiny deterministic models and data."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, NoReturn

import pytest
import torch

import danlu.train as dt
import danlu.train.state as state_module
from danlu.train.context import TrainContext


def tiny_regression(n: int = 256, d: int = 8, seed: int = 0) -> torch.utils.data.TensorDataset:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d, generator=g)
    w = torch.randn(d, 1, generator=g)
    y = x @ w + 0.01 * torch.randn(n, 1, generator=g)
    return torch.utils.data.TensorDataset(x, y)


def mse_loss(model: torch.nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    x, y = batch
    return torch.nn.functional.mse_loss(model(x), y)


def sign_task(n: int, d: int) -> tuple[torch.Tensor, torch.utils.data.TensorDataset]:
    """``n`` inputs of ``d`` features from torch's global generator, and the dataset of them
    labelled by the sign of their first feature (a learnable two-class task)."""
    inputs = torch.randn(n, d)
    return inputs, torch.utils.data.TensorDataset(inputs, (inputs[:, 0] > 0).long())


def cross_entropy_loss(
    model: torch.nn.Module, batch: tuple[torch.Tensor, torch.Tensor]
) -> torch.Tensor:
    x, y = batch
    return torch.nn.functional.cross_entropy(model(x), y)


def tiny_model(d: int = 8, seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(d, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))


def tiny_context(directory: Path, seed: int = 0) -> TrainContext:
    """A training context of :func:`tiny_model` (SGD, global batch 8 of 32 samples) that
    checkpoints to ``directory``, no metrics file, no environment."""
    model = tiny_model(seed=seed)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    return dt.init(
        model,
        opt,
        global_batch_size=8,
        dataset_size=32,
        checkpoint_dir=str(directory),
        metrics_file=False,
        environ={},
    )


def checkpointed_step(directory: Path) -> int:
    """The step a run resuming from ``directory`` starts at (0: no checkpoint)."""
    with tiny_context(directory) as ctx:
        return ctx.step_num


def join_as_rank(rank: int, world: int, port: int) -> dict[str, str]:
    """Set the variables of torch.distributed's ``env://`` rendezvous for rank ``rank`` of
    ``world`` on this machine, its store on ``port`` (as torchrun gives a worker); returns
    them (for ``dt.init``'s ``environ``)."""
    environ = {
        "RANK": str(rank),
        "WORLD_SIZE": str(world),
        "LOCAL_RANK": "0",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(port),
    }
    os.environ.update(environ)
    return environ


def exit_now(code: int) -> NoReturn:
    """Exit a worker process with ``code`` now, skipping the interpreter's finalization.

    Objects of torch.distributed outlive ``destroy_process_group``: a DDP model leaves
    references to its process group inside torch after it is freed (ten more on the group
    after one ``DistributedDataParallel``, measured with torch 2.13), and so do a device
    mesh and the collectives of a sharded (DCP) checkpoint. The group's gloo threads are then
    still there when the interpreter tears down, and rarely a rank dies there with SIGABRT,
    "terminate called without an active exception", after its work was done (twice in about
    250 runs of the DDP helper's test, twice in about 60 of the sharded one's). Call it once
    the rank has left the group and written its output."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


SRC = Path(__file__).resolve().parents[2] / "src"
"""This checkout's sources, put first on a worker process's ``PYTHONPATH``."""


def worker_ranks_outcome(
    script: Path, world: int, args: Sequence[str], timeout: float, **env: str
) -> list[tuple[int | None, str]]:
    """Run ``world`` processes of ``script`` (a gloo job's ranks on this machine), each as
    ``script RANK WORLD PORT *args``, with one OpenMP thread, this checkout's sources and
    ``env``: each rank's exit code and stderr, in rank order. A rank still running
    ``timeout`` seconds after the start (a hang, or waiting in a collective for a rank that
    failed) is killed: its exit code reads None and its stderr (all it wrote) ends with
    ``"[killed: still running after ... s]"``."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    path = os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")])
    full_env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=path, **env)
    procs = [
        subprocess.Popen(
            [sys.executable, str(script), str(rank), str(world), str(port), *args],
            env=full_env,
            stderr=subprocess.PIPE,
        )
        for rank in range(world)
    ]
    deadline = time.monotonic() + timeout
    outcome: list[tuple[int | None, str]] = []
    try:
        for p in procs:
            try:
                _, err = p.communicate(timeout=max(0.1, deadline - time.monotonic()))
                outcome.append((p.returncode, err.decode(errors="replace")))
            except subprocess.TimeoutExpired:
                p.kill()
                _, err = p.communicate()
                note = f"\n[killed: still running after {timeout:g} s]"
                outcome.append((None, err.decode(errors="replace") + note))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    return outcome


def run_worker_ranks(
    script: Path, world: int, args: Sequence[str], timeout: float, **env: str
) -> list[tuple[int | None, str]]:
    """Run ``world`` processes of ``script`` as :func:`worker_ranks_outcome` does and assert
    that each exits 0 within ``timeout`` seconds; on a failure the assertion shows every
    rank's exit code and the end of its stderr. Returns each rank's exit code and stderr."""
    outcome = worker_ranks_outcome(script, world, args, timeout, **env)
    if any(code != 0 for code, _ in outcome):
        said = "\n".join(
            f"--- rank {rank}: exit code {code}\n{err[-3000:]}"
            for rank, (code, err) in enumerate(outcome)
        )
        raise AssertionError(f"not every rank exited 0:\n{said}")
    return outcome


def small_context(directory: Path) -> TrainContext:
    """A fresh context of :func:`tiny_model` and SGD over 16 samples at a global batch of 4,
    checkpointing to ``directory`` (nothing resumed, no metrics file, no progress line)."""
    model = tiny_model(seed=0)
    return dt.init(
        model,
        torch.optim.SGD(model.parameters(), lr=0.01),
        global_batch_size=4,
        dataset_size=16,
        checkpoint_dir=str(directory),
        resume=False,
        metrics_file=False,
        progress=False,
        environ={},
    )


def checkpoint_two_steps(directory: Path) -> int:
    """Train :func:`small_context` two steps of :func:`tiny_regression` (16 samples), save a
    checkpoint to ``directory`` and return the step saved (2)."""
    data = tiny_regression(16)
    with small_context(directory) as ctx:
        for _ in ctx.epochs(1):
            for batch in ctx.batches(data):
                ctx.step(batch, mse_loss)
                if ctx.step_num == 2:
                    break
        ctx.save()
        return ctx.step_num


@contextlib.contextmanager
def damaged_checkpoints(
    monkeypatch: pytest.MonkeyPatch, damage: Callable[[dict[str, Any]], None]
) -> Iterator[None]:
    """Checkpoints saved inside are written with ``damage`` applied to their state (the
    state :func:`danlu.train.state.capture_state` returns)."""
    real = state_module.capture_state

    def written(*args: Any, **kwargs: Any) -> Any:
        state = real(*args, **kwargs)
        damage(state)
        return state

    monkeypatch.setattr(state_module, "capture_state", written)
    try:
        yield
    finally:
        monkeypatch.setattr(state_module, "capture_state", real)
