"""A training job for the real-GPU end-to-end test: ``danlu.train.fit`` on the GPU the
executor hands it, then matrix products for ``--seconds`` so the GPU draws power the energy
meter can see. Prints one line the test reads: ``gpu-job device=... visible=... name=...
steps=... loss=A->B memory_bytes=...``."""

from __future__ import annotations

import argparse
import os
import time

import torch
from torch import nn

import danlu.train as dt


def loss_fn(model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    x, y = batch
    return nn.functional.cross_entropy(model(x), y)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--seconds", type=float, default=5.0)
    args = ap.parse_args()
    torch.manual_seed(0)
    inputs = torch.randn(4096, 512)
    labels = (inputs[:, 0] > 0).long()  # a learnable synthetic task
    data = torch.utils.data.TensorDataset(inputs, labels)
    model = nn.Sequential(nn.Linear(512, 2048), nn.ReLU(), nn.Linear(2048, 2))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    ctx = dt.fit(model, opt, data, loss_fn, epochs=100, global_batch_size=256, max_steps=args.steps)
    device = next(model.parameters()).device
    first, last = ctx.history[0], ctx.history[-1]
    if device.type == "cuda":
        a = torch.randn(8192, 8192, device=device, dtype=torch.bfloat16)
        end = time.monotonic() + args.seconds
        while time.monotonic() < end:
            for _ in range(20):
                a = torch.tanh(a @ a)
            torch.cuda.synchronize(device)
    print(
        f"gpu-job device={device} visible={os.environ.get('CUDA_VISIBLE_DEVICES')} "
        f"name={torch.cuda.get_device_name(device) if device.type == 'cuda' else 'cpu'} "
        f"steps={last['step']} loss={first['loss']:.4f}->{last['loss']:.4f} "
        f"memory_bytes={last.get('memory_bytes', 0)} "
        f"limit={os.environ.get('DANLU_GPU_MEMORY_LIMIT')}",
        flush=True,
    )


if __name__ == "__main__":
    main()
