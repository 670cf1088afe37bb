"""Shared helpers for danlu.train tests: tiny deterministic models and data."""

from __future__ import annotations

import os
import sys
from typing import NoReturn

import torch


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
