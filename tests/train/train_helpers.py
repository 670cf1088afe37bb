"""Shared helpers for danlu.train tests: tiny deterministic models and data."""

from __future__ import annotations

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


def tiny_model(d: int = 8, seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(d, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
