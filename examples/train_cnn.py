"""A ResNet-style CNN on synthetic images, trained with danlu.train (runs on CPU in seconds).

    PYTHONPATH=src python examples/train_cnn.py [--steps 20] [--precision bf16]

On a danlu cluster the same script picks up DANLU_* (checkpoint dir, batch size, metrics API).
"""

from __future__ import annotations

import argparse

import torch
from torch import nn

import danlu.train as dt


class Block(nn.Module):
    def __init__(self, c: int) -> None:
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(c, c, 3, padding=1),
            nn.BatchNorm2d(c),
            nn.ReLU(),
            nn.Conv2d(c, c, 3, padding=1),
            nn.BatchNorm2d(c),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x + self.body(x))


def make_model(classes: int = 10, c: int = 16) -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(3, c, 3, padding=1),
        nn.ReLU(),
        Block(c),
        Block(c),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(c, classes),
    )


def loss_fn(model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    x, y = batch
    return nn.functional.cross_entropy(model(x), y)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--precision", default="fp32")
    ap.add_argument("--checkpoint-dir", default=None)
    args = ap.parse_args()
    torch.manual_seed(0)
    images = torch.randn(1024, 3, 16, 16)
    labels = (images.mean(dim=(1, 2, 3)) > 0).long()  # a learnable synthetic task
    data = torch.utils.data.TensorDataset(images, labels)
    model = make_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=args.steps)
    ctx = dt.fit(
        model,
        opt,
        data,
        loss_fn,
        epochs=10,
        scheduler=sched,
        global_batch_size=64,
        micro_batch_size=32,
        max_steps=args.steps,
        precision=args.precision,
        warmup_steps=3,
        checkpoint_dir=args.checkpoint_dir,
        metrics_file=False,
    )
    first, last = ctx.history[0], ctx.history[-1]
    print(
        f"steps {last['step']}: loss {first['loss']:.3f} -> {last['loss']:.3f}, "
        f"accumulation {last['accumulation']}, {last['samples_per_s']:.0f} samples/s"
    )


if __name__ == "__main__":
    main()
