"""A small GPT on synthetic tokens, with danlu.train in the user's own loop (CPU, seconds).

    PYTHONPATH=src python examples/train_gpt.py [--steps 20]

Shows the context API: init() -> epochs()/batches() -> step(), gradient clipping, warmup on
top of a torch scheduler, mixed precision, anomaly skipping; SIGTERM checkpoints and exits 75.
"""

from __future__ import annotations

import argparse

import torch
from torch import nn

import danlu.train as dt

VOCAB, CTX = 64, 32


class TinyGPT(nn.Module):
    def __init__(self, dim: int = 64, layers: int = 2, heads: int = 4) -> None:
        super().__init__()
        self.tok = nn.Embedding(VOCAB, dim)
        self.pos = nn.Parameter(torch.zeros(CTX, dim))
        layer = nn.TransformerEncoderLayer(
            dim, heads, 4 * dim, dropout=0.0, batch_first=True, norm_first=True
        )
        # no nested tensors: they need post-norm layers (torch warns on every run otherwise)
        self.blocks = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = nn.Linear(dim, VOCAB)
        self.register_buffer("mask", nn.Transformer.generate_square_subsequent_mask(CTX))

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        t = idx.shape[1]
        h = self.tok(idx) + self.pos[:t]
        return self.head(self.blocks(h, mask=self.mask[:t, :t], is_causal=True))


def loss_fn(model: nn.Module, batch: torch.Tensor) -> torch.Tensor:
    logits = model(batch[:, :-1])
    return nn.functional.cross_entropy(logits.reshape(-1, VOCAB), batch[:, 1:].reshape(-1))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--precision", default="bf16")
    ap.add_argument("--checkpoint-dir", default=None)
    args = ap.parse_args()
    torch.manual_seed(0)
    start = torch.randint(0, VOCAB, (512, 1))
    tokens = (start + torch.arange(CTX + 1)) % VOCAB  # counting sequences: learnable
    model = TinyGPT()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=args.steps)
    with dt.init(
        model,
        opt,
        sched,
        global_batch_size=32,
        precision=args.precision,
        warmup_steps=5,
        clip_grad_norm=1.0,
        dataset_size=len(tokens),
        checkpoint_dir=args.checkpoint_dir,
        metrics_file=False,
    ) as ctx:
        # the loop ends at --steps: each record's progress says so (1 on the last step)
        ctx.stop_at_step(args.steps)
        if ctx.step_num >= args.steps:  # resumed from a checkpoint at (or past) the bound
            return
        for _ in ctx.epochs(100):
            for batch in ctx.batches(tokens):
                r = ctx.step(batch, loss_fn)
                if ctx.step_num % 5 == 0:
                    # r.lr: the LR this step used (ctx.lr.lr is the next step's already)
                    print(
                        f"step {ctx.step_num}: loss {r.loss:.3f} lr {r.lr:.2e} "
                        f"grad_norm {r.grad_norm:.2f}"
                    )
                if ctx.step_num >= args.steps:
                    return


if __name__ == "__main__":
    main()
