"""Keeping a job within the GPU memory it was charged (``DANLU_GPU_MEMORY_LIMIT``), the CUDA
context included.

The control plane charges a job ``resources.gpu_memory`` bytes of each GPU and packs other jobs
onto the rest. ``torch.cuda.set_per_process_memory_fraction`` caps only what PyTorch's caching
allocator reserves; the CUDA context (the context itself, the CUDA runtime's and PyTorch's
kernels, cuBLAS/cuDNN handles: ~750 MiB on an H100) comes on top. A fraction of the whole charge
let the process hold the charge *plus* its context, and a neighbour packed by the charge could
run out of memory. The allocator therefore gets the charge less what the process holds outside
it (:func:`memory_cap`, the arithmetic; :func:`apply_memory_limit`, the measuring and the cap):

* **measured** when the cap is set (:func:`measured_outside`), from NVML, since
  ``torch.cuda.mem_get_info`` is device-wide (it counts the neighbours' memory too) and cannot
  be read before this process's CUDA initialisation without making that initialisation: NVML's
  count for this process (its pid) less ``torch.cuda.memory_reserved``; where NVML does not list
  the pid (a container's own pid namespace: NVML names host pids), the device-wide count NVML
  gives before and after this process's CUDA initialisation, when it was not initialised
  before (a neighbour that allocates meanwhile is counted as this process's, which lowers the
  cap; one that frees meanwhile lowers the count, which the allowance below makes up for);
* and never below the **allowance** for the context that the control plane's own estimate
  adds for this GPU type (``gpu_memory: auto`` charges the allocator's reserved peak plus the
  GPU table's ``context_bytes``: :func:`danlu.estimate.memory.predict.auto_gpu_memory`): CUDA
  loads kernels lazily, so the context grows after the cap is set (cuBLAS on the first matrix
  product); the allowance, measured once the first kernels ran, covers that growth, and the
  allocator gets exactly the reserved peak the estimate charged for. The allowance is the
  figure the control plane tells the job (``DANLU_GPU_CONTEXT_BYTES``: the one its estimate
  used for the GPU type of the job's node, as the node's inventory names it, which the
  operator may have set: ``DANLU_SLURM_GPU_TYPE`` for a Slurm Gres type danlu does not
  know, a Ray node's accelerator type), else (a job run outside danlu, or by a control
  plane that does not tell it) the built-in GPU table's for the type read from the device's
  name (:func:`context_allowance`). The two differ where the node's type is not the one the
  device's name reads as: an L40S node listed as an ``L4`` was planned with 300 MiB and the
  device's name gives 768 MiB (the allocator got 468 MiB less than the peak it was charged
  for), a ``generic`` node of A100s the reverse.

A charge no larger than that is refused (:class:`ContextOutOfMemoryError`): nothing would be left
for the model.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass

import torch

from danlu.core.errors import ConfigError
from danlu.core.units import format_bytes

log = logging.getLogger("danlu.train")


class ContextOutOfMemoryError(ConfigError):
    """The job's GPU memory limit (``DANLU_GPU_MEMORY_LIMIT``, from the job spec's
    ``resources.gpu_memory``) is no larger than what the process holds outside PyTorch's
    caching allocator (the CUDA context): nothing is left for the model, at any batch.

    The last line of its traceback (its name and the start of its message are a contract)
    is a verdict that the job cannot fit (``danlu.executors.base.CANNOT_FIT_MARK``): a run
    with the same limit fails the same way, so the job ends FAILED at once, no restart."""


@dataclass(frozen=True)
class OutsideAllocator:
    """What a process holds on a GPU outside PyTorch's caching allocator, as the cap leaves it
    out: the larger of :attr:`measured` and :attr:`allowance`."""

    measured: int | None
    """Bytes measured when the cap is set (:func:`measured_outside`); None: not measured."""
    how: str
    """What measured :attr:`measured` (``NVML's count for this process``), or why it was not
    measured."""
    allowance: int
    """The context the control plane's memory estimate allows for this GPU type."""
    gpu: str
    """The GPU table's name of the type (``h100``), or the device's own name."""
    planned: bool = False
    """:attr:`allowance` is the control plane's own figure (``DANLU_GPU_CONTEXT_BYTES``),
    not the built-in GPU table's for :attr:`gpu`."""

    @property
    def bytes(self) -> int:
        """The bytes the allocator's cap leaves out."""
        return max(self.measured or 0, self.allowance)

    def describe(self) -> str:
        """The reason for :attr:`bytes`, in words, for the log and the error."""
        measured = (
            f"{format_bytes(self.measured)} measured by {self.how}"
            if self.measured is not None
            else f"not measured: {self.how}"
        )
        if self.planned:
            allowed = (
                f"{format_bytes(self.allowance)} allowed for this node's GPU type by the "
                "control plane's memory estimate (DANLU_GPU_CONTEXT_BYTES; the device is "
                f"{self.gpu})"
            )
        else:
            allowed = (
                f"{format_bytes(self.allowance)} allowed for the GPU type {self.gpu} by the "
                "control plane's memory estimate"
            )
        return f"the CUDA context: {measured}; {allowed}"


@dataclass(frozen=True)
class MemoryCap:
    """The cap of a process's caching allocator on one GPU (:func:`memory_cap`)."""

    limit_bytes: int
    """What the job was charged (``DANLU_GPU_MEMORY_LIMIT``)."""
    total_bytes: int
    """The device's memory, as the allocator reads it (``torch.cuda.mem_get_info``)."""
    outside_bytes: int
    """What the process holds outside the allocator, left out of the cap."""
    allocator_bytes: int
    """What the allocator may reserve: ``limit_bytes - outside_bytes``, at most the device's
    memory."""
    fraction: float
    """``allocator_bytes / total_bytes``: the argument of
    ``torch.cuda.set_per_process_memory_fraction``."""


def memory_cap(
    limit_bytes: int, total_bytes: int, outside_bytes: int, outside_note: str = ""
) -> MemoryCap:
    """The allocator's share of a job charged ``limit_bytes`` of a GPU of ``total_bytes``
    whose process holds ``outside_bytes`` outside the allocator: the charge less those
    bytes, as a fraction of the device (at most 1). ``outside_note`` says what those bytes
    are, for the error.

    Raises :class:`ContextOutOfMemoryError` when ``limit_bytes <= outside_bytes``, naming
    ``resources.gpu_memory`` and the least it must be."""
    allocator = limit_bytes - outside_bytes
    if allocator <= 0:
        note = f" ({outside_note})" if outside_note else ""
        raise ContextOutOfMemoryError(
            f"DANLU_GPU_MEMORY_LIMIT, the job's resources.gpu_memory, is "
            f"{format_bytes(limit_bytes)} ({limit_bytes} bytes): no more than the "
            f"{format_bytes(outside_bytes)} ({outside_bytes} bytes) left out for what the "
            f"process holds on the GPU outside PyTorch's caching allocator{note}, so nothing "
            "is left for the model. "
            f"Submit the job again with a resources.gpu_memory of those "
            f"{format_bytes(outside_bytes)} plus the training step's peak (gpu_memory: auto "
            "estimates both), or on whole GPUs (no gpu_memory)"
        )
    allocator = min(allocator, total_bytes)
    return MemoryCap(
        limit_bytes, total_bytes, outside_bytes, allocator, min(1.0, allocator / total_bytes)
    )


def context_allowance(device_name: str, total_bytes: int) -> tuple[int, str]:
    """(the context bytes, the GPU table's name of the type) that the control plane's memory
    estimate allows for the GPU a device reports (``torch.cuda.get_device_properties``'s
    ``name`` and its memory): the GPU type read from the name, as a node's is, and its
    ``context_bytes`` in the built-in GPU table
    (:func:`danlu.estimate.memory.gpus.gpu_for_memory`); a type the table lacks gets the
    table's figure for a GPU of unknown capability, as the control plane plans it."""
    from danlu.core.cluster import gpu_type_from_device
    from danlu.estimate.memory.gpus import UNKNOWN_CONTEXT_BYTES, gpu_for_memory

    try:
        spec = gpu_for_memory(gpu_type_from_device(device_name, total_bytes).name, total_bytes)
    except Exception:  # an allowance must not stop training: the conservative figure
        return UNKNOWN_CONTEXT_BYTES, device_name or "unknown GPU"
    return spec.context_bytes, spec.name


def _nvml_device_used(index: int) -> int | None:
    """NVML's count of the used memory of the CUDA device ``index`` (every process's), read
    without initialising CUDA; None where NVML cannot be read (no ``nvidia-ml-py``, no
    driver)."""
    read = getattr(torch.cuda, "device_memory_used", None)  # torch >= 2.6
    if read is None:
        return None
    try:
        return int(read(index))
    except Exception:  # nvidia-ml-py missing, NVML failing: not measured
        return None


def _nvml_process_used(device: torch.device) -> int | None:
    """NVML's count of the memory this process (its pid) holds on ``device``; None where
    NVML cannot be read or does not list the pid (another pid namespace, or the count not
    permitted)."""
    try:
        import pynvml  # nvidia-ml-py

        uuid = str(torch.cuda.get_device_properties(device).uuid)
        pynvml.nvmlInit()
        try:
            handle = pynvml.nvmlDeviceGetHandleByUUID(f"GPU-{uuid}")
            processes = pynvml.nvmlDeviceGetComputeRunningProcesses(handle)
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # nvidia-ml-py missing, NVML failing: not measured
        return None
    pid = os.getpid()
    counts = [p.usedGpuMemory for p in processes if p.pid == pid]
    if not counts or any(c is None for c in counts):
        return None
    return int(sum(counts))


def measured_outside(device: torch.device, before: int | None) -> tuple[int | None, str]:
    """(bytes, how) this process holds on ``device`` outside PyTorch's caching allocator,
    with CUDA initialised there: NVML's count for this pid less ``memory_reserved``, else
    NVML's device-wide count now less ``before`` (the count before this process's CUDA
    initialisation; None: it was initialised already) less ``memory_reserved``; (None, why)
    where neither can be read."""
    reserved = int(torch.cuda.memory_reserved(device))
    own = _nvml_process_used(device)
    if own is not None:
        return max(own - reserved, 0), "NVML's count for this process"
    if before is None:
        return None, (
            "NVML (nvidia-ml-py) gave no count of this process, and none from before CUDA's "
            "initialisation here"
        )
    after = _nvml_device_used(_index(device))
    if after is None or after - before - reserved <= 0:
        return None, "NVML's device-wide count did not grow over CUDA's initialisation here"
    return after - before - reserved, "NVML's device-wide count over CUDA's initialisation"


def _index(device: torch.device) -> int:
    """The CUDA index of ``device`` (the current device's when it names none)."""
    return device.index if device.index is not None else torch.cuda.current_device()


def apply_memory_limit(
    limit_bytes: int | None, device: torch.device, context_bytes: int | None = None
) -> MemoryCap | None:
    """Cap this process's caching allocator on ``device`` so that the process stays within
    ``limit_bytes`` (``DANLU_GPU_MEMORY_LIMIT``), what it holds outside the allocator
    included (the module docstring says how that is counted), and log the cap.
    ``context_bytes`` is the control plane's allowance for the context
    (``DANLU_GPU_CONTEXT_BYTES``); None: the built-in GPU table's (:func:`context_allowance`).

    Initialises CUDA on ``device``. Returns the cap, or None on CPU or without a limit.
    Raises :class:`ContextOutOfMemoryError` when the limit leaves nothing for the
    allocator."""
    if limit_bytes is None or device.type != "cuda" or not torch.cuda.is_available():
        return None
    # NVML's count before CUDA's initialisation here: mem_get_info would make the context
    initialised = torch.cuda.is_initialized()  # type: ignore[no-untyped-call]
    before = None if initialised else _nvml_device_used(device.index or 0)
    _, total = torch.cuda.mem_get_info(device)  # makes the CUDA context: what it holds counts
    props = torch.cuda.get_device_properties(device)
    if context_bytes is not None:  # the figure the control plane planned the job with
        allowance, gpu = context_bytes, str(props.name)
    else:
        allowance, gpu = context_allowance(str(props.name), int(props.total_memory))
    measured, how = measured_outside(device, before)
    outside = OutsideAllocator(measured, how, allowance, gpu, context_bytes is not None)
    cap = memory_cap(limit_bytes, int(total), outside.bytes, outside.describe())
    torch.cuda.set_per_process_memory_fraction(cap.fraction, device)
    log.info(
        "GPU memory cap on %s: DANLU_GPU_MEMORY_LIMIT %s less %s outside PyTorch's caching "
        "allocator (%s) leaves the allocator %s (fraction %.6f of %s)",
        device,
        format_bytes(limit_bytes),
        format_bytes(outside.bytes),
        outside.describe(),
        format_bytes(cap.allocator_bytes),
        cap.fraction,
        format_bytes(cap.total_bytes),
    )
    return cap
