"""Real peaks to check the predictions against (imports torch; benchmarks and tests only).

* :func:`cpu_peak`: runs the same steady-state step for real on the CPU under
  ``torch.profiler`` (``profile_memory=True``) from model creation on, and returns the peak of
  the CPU allocator's live bytes over the measured step (kernel-internal buffers included);
* :func:`cuda_peak`: runs it on a GPU and returns ``torch.cuda.max_memory_reserved`` and
  ``max_memory_allocated`` over the measured step.
"""

from __future__ import annotations

from typing import Any

import torch

from danlu.estimate.memory import steps


def _setup(
    model_ref: str,
    batch_size: int,
    optimizer: str,
    checkpointing: bool,
    device: str,
    foreach: bool | None,
) -> tuple[Any, Any, Any, Any]:
    model, make_batch, loss_fn = steps.build(steps.load_factory(model_ref), model_ref)
    model.to(device).train()
    if checkpointing:
        steps.enable_checkpointing(model, model_ref)
    opt = steps.make_optimizer(optimizer, model, foreach)
    batch = steps.checked_batch(make_batch(batch_size), model_ref)
    if device != "cpu":
        from torch.utils._pytree import tree_map

        batch = tree_map(lambda t: t.to(device) if isinstance(t, torch.Tensor) else t, batch)
    return model, opt, batch, loss_fn


def cpu_peak(
    model_ref: str,
    batch_size: int,
    *,
    precision: str = "fp32",
    optimizer: str = "adamw",
    checkpointing: bool = False,
    accumulation: int = 1,
) -> int:
    """Peak live bytes of the CPU allocator over a real steady-state step."""
    from torch._C._profiler import _EventType
    from torch.profiler import ProfilerActivity, profile

    torch.manual_seed(0)
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        model, opt, batch, loss_fn = _setup(
            model_ref, batch_size, optimizer, checkpointing, "cpu", None
        )
        steps.train_step(model, opt, batch, loss_fn, precision, accumulation, lambda _: None)
        with torch.profiler.record_function("danlu_measured_step"):
            steps.train_step(model, opt, batch, loss_fn, precision, accumulation, lambda _: None)
    allocs: list[tuple[int, int]] = []
    window = (0, 0)
    stack = list(prof.profiler.kineto_results.experimental_event_tree())
    while stack:
        node = stack.pop()
        if node.tag == _EventType.Allocation:
            allocs.append((node.start_time_ns, node.extra_fields.alloc_size))
        elif node.name == "danlu_measured_step":
            window = (node.start_time_ns, node.end_time_ns)
        stack.extend(node.children)
    allocs.sort()
    live = 0
    peak = None
    for t, size in allocs:
        if peak is None and t >= window[0]:
            peak = live
        live += size
        if peak is not None and t <= window[1]:
            peak = max(peak, live)
    return int(peak or 0)


def cuda_peak(
    model_ref: str,
    batch_size: int,
    *,
    precision: str = "fp32",
    optimizer: str = "adamw",
    checkpointing: bool = False,
    accumulation: int = 1,
) -> dict[str, int]:
    """``max_memory_reserved`` / ``max_memory_allocated`` over a real steady-state GPU step.

    The caching allocator's unused blocks are released first: blocks cached by the caller's
    earlier work (another test in the same process) would count as reserved otherwise."""
    torch.cuda.empty_cache()
    torch.manual_seed(0)
    model, opt, batch, loss_fn = _setup(
        model_ref, batch_size, optimizer, checkpointing, "cuda", None
    )
    run_step = steps.train_step
    run_step(model, opt, batch, loss_fn, precision, accumulation, lambda _: None, "cuda")
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    run_step(model, opt, batch, loss_fn, precision, accumulation, lambda _: None, "cuda")
    torch.cuda.synchronize()
    free, total = torch.cuda.mem_get_info()
    out = {
        "reserved": torch.cuda.max_memory_reserved(),
        "allocated": torch.cuda.max_memory_allocated(),
        "device_used": total - free,
        "total": total,
    }
    return out
