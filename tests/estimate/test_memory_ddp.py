"""DDP's gradient buckets in the memory model: ``TraceRequest(data_parallel=True)``."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from danlu.estimate.memory import TraceRequest, get_gpu, replay, trace

pytest.importorskip("torch")

ZOO = "danlu.estimate.zoo:"


def test_a_data_parallel_step_holds_one_more_gradient_sized_buffer() -> None:
    """danlu.train wraps a job on more than one GPU in DDP with gradient_as_bucket_view=False:
    its buckets are one more buffer of the gradients' bytes, which the estimate left out."""
    plain, ddp = (
        trace(TraceRequest(ZOO + "gpt2_tiny", (4,), data_parallel=dp))[0] for dp in (False, True)
    )
    parameters = plain.breakdown["parameters"]  # fp32: the gradients' bytes
    assert "ddp_buckets" not in plain.breakdown
    assert ddp.breakdown["ddp_buckets"] == parameters
    assert ddp.peak_logical_bytes == plain.peak_logical_bytes + parameters
    assert sum(ddp.breakdown.values()) == ddp.peak_logical_bytes
    gpu = get_gpu("h100")
    assert replay(ddp, gpu).peak_device_bytes > replay(plain, gpu).peak_device_bytes


def test_the_buckets_hold_what_a_real_ddp_holds(tmp_path: Path) -> None:
    """The modelled buckets are DDP's own once it has rebuilt them (one process, gloo, in a
    subprocess), and add up to the gradients' bytes."""
    code = textwrap.dedent(f"""
        import json, torch.distributed as dist
        from torch.nn.parallel import DistributedDataParallel as DDP
        from danlu.estimate.memory.steps import ddp_bucket_sizes
        from danlu.estimate.zoo import gpt2_tiny, mlp_small, resnet18
        dist.init_process_group(
            "gloo", init_method="file://{tmp_path / "store"}", rank=0, world_size=1
        )
        out = {{}}
        for factory in (mlp_small, gpt2_tiny, resnet18):
            model, make_batch, loss_fn = factory()
            wrapped = DDP(model)
            for _ in range(3):  # DDP rebuilds its buckets after the first iteration
                loss_fn(wrapped, make_batch(2)).backward()
            real = str(wrapped._get_ddp_logging_data().get("rebuilt_bucket_sizes", ""))
            out[factory.__name__] = [
                [int(v) for v in real.replace(" ", "").split(",") if v],
                ddp_bucket_sizes(model),
                sum(p.numel() * p.element_size() for p in model.parameters()),
            ]
        dist.destroy_process_group()
        print(json.dumps(out))
    """)
    run = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False, timeout=300
    )
    assert run.returncode == 0, run.stderr[-2000:]
    sizes = json.loads(run.stdout.strip().splitlines()[-1])
    for name, (real, modelled, parameters) in sizes.items():
        assert real == modelled, name
        assert sum(modelled) == parameters, name
    assert len(sizes["resnet18"][1]) == 3  # 1 MiB first, then 25 MiB caps
