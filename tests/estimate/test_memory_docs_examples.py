"""docs/estimate-memory.md's Python example and its figures on bf16 with a frozen base,
checked against the code: the example is run as written (through the real tracer) and
prints what the page says; the figures are what the tracer says."""

from __future__ import annotations

import contextlib
import io
import json
import re
import textwrap
from pathlib import Path

import pytest

from danlu.estimate.memory import StepTrace, TraceRequest

pytest.importorskip("torch")

DOC = Path(__file__).resolve().parents[2] / "docs" / "estimate-memory.md"


def _section(title: str) -> str:
    text = DOC.read_text(encoding="utf-8")
    start = text.index(f"\n## {title}")
    end = text.find("\n## ", start + 1)
    return text[start : end if end >= 0 else None]


def test_the_python_example_prints_what_the_page_says() -> None:
    """One trace of gpt2_tiny through the tracer's subprocess, as the page's reader runs it
    (a few seconds: the worker's start-up is most of it)."""
    section = _section("From Python: `danlu.estimate.estimate_memory`")
    code, said = re.findall(r"```(?:python|text)\n(.*?)```", section, re.DOTALL)[:2]
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(code, str(DOC), "exec"), {"__name__": "docs_example"})  # noqa: S102
    assert printed.getvalue() == said


LORA = "docs_lora_models:adapted"
LORA_MODELS = textwrap.dedent(
    """
    import torch
    from torch import nn


    class Adapted(nn.Module):
        def __init__(self, width, rank=8):
            super().__init__()
            self.base = nn.Linear(width, width).requires_grad_(False)
            self.down = nn.Linear(width, rank, bias=False)
            self.up = nn.Linear(rank, width, bias=False)

        def forward(self, x):
            return self.base(x) + self.up(self.down(x))


    def adapted():
        def make_batch(b):
            return torch.randn(b, 16, 1024)

        def loss_fn(model, batch):
            return model(batch).pow(2).mean()

        return nn.Sequential(*[Adapted(1024) for _ in range(4)]), make_batch, loss_fn
    """
)


def test_bf16_keeps_more_than_fp32_with_a_frozen_base_at_small_batches(tmp_path: Path) -> None:
    """The page's figures: four frozen 1024 x 1024 layers with rank-8 adapters keep more in
    bf16 than in fp32 at batch 1 (autocast's bf16 copies of the frozen weights, saved for the
    backward pass), less at batch 64."""
    from danlu.estimate.memory import trace_worker

    (tmp_path / "docs_lora_models.py").write_text(LORA_MODELS)
    peaks: dict[tuple[str, int], int] = {}
    for precision in ("fp32", "bf16"):
        out = io.StringIO()
        req = TraceRequest(LORA, (1, 64), precision=precision, sys_path=(str(tmp_path),))
        trace_worker.run(req, out)
        for reply in json.loads(out.getvalue().splitlines()[-1])["result"]:
            tr = StepTrace.from_json(reply)
            peaks[precision, tr.batch_size] = tr.peak_logical_bytes
    assert peaks["bf16", 1] > peaks["fp32", 1] and peaks["bf16", 64] < peaks["fp32", 64]
    text = " ".join(DOC.read_text(encoding="utf-8").split())
    mb = {key: f"{value / 1e6:.1f} MB" for key, value in peaks.items()}
    assert (
        f"keep {mb['fp32', 1]} of live tensors at batch 1 in fp32 and {mb['bf16', 1]} in bf16"
        in text
    ), mb
    assert f"at batch 64 {mb['fp32', 64]} in fp32 and {mb['bf16', 64]} in bf16" in text, mb
