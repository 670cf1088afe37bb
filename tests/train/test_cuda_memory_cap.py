"""The GPU memory cap on a real GPU (``gpu``-marked; skipped without ``nvidia-smi``): a process
capped at ``DANLU_GPU_MEMORY_LIMIT`` that fills its allocator until torch's OOM holds no more
of the GPU than the limit, its CUDA context (grown by cuBLAS's first matrix product) included.
``test_memory_cap.py`` covers the arithmetic and the wiring on any host."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(shutil.which("nvidia-smi") is None, reason="no NVIDIA GPU here"),
]

SRC = Path(__file__).resolve().parents[2] / "src"
LIMIT = 2 << 30
"""The job's memory limit: 2 GiB of the GPU."""
BLOCK = 16 << 20
"""The allocator is filled by blocks of 16 MiB."""

FILL = """
import json, sys, torch
from danlu.train.memory_cap import apply_memory_limit
cap = apply_memory_limit(int(sys.argv[1]), torch.device("cuda", 0))
a = torch.randn(1024, 1024, device="cuda", requires_grad=True)
(a @ a).relu().sum().backward()  # cuBLAS and the autograd kernels loaded: the context grown
blocks = []
try:
    while True:
        blocks.append(torch.empty(int(sys.argv[2]), dtype=torch.uint8, device="cuda"))
except torch.OutOfMemoryError:
    pass
torch.cuda.synchronize()
free, total = torch.cuda.mem_get_info(0)
print(json.dumps({"used": total - free, "reserved": torch.cuda.memory_reserved(0),
                  "allocator": cap.allocator_bytes}))
"""


def test_a_process_filling_its_allocator_stays_within_its_limit_context_included() -> None:
    if not torch.cuda.is_available():
        pytest.skip("torch sees no CUDA device")
    free, total = torch.cuda.mem_get_info(0)  # this process's own context counts from here
    others = total - free
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")]))
    done = subprocess.run(
        [sys.executable, "-c", FILL, str(LIMIT), str(BLOCK)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    held = seen["used"] - others  # the whole child process on the GPU
    assert held <= LIMIT, (held, seen)
    # the allocator had its share: filled to within one block of it
    assert seen["reserved"] > seen["allocator"] - BLOCK, seen
