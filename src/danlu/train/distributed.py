"""Distributed helpers: process group set-up, agreement collectives, DDP wrapping, consistency.

One :class:`Distributed` object serves both cases: with ``world_size == 1`` every collective is
a local no-op, so the training code never branches on "am I distributed".
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import logging
from typing import Any

import torch
import torch.distributed as dist

from danlu.core.errors import ConfigError, DanluError
from danlu.train.env import JobEnv

log = logging.getLogger("danlu.train")

DEFAULT_TIMEOUT_S = 300.0
"""Collective timeout: a peer that vanished turns into an error, not an endless hang."""


GROUP_KEEPER = "_danlu_process_group"
"""The attribute of the DDP wrapper :meth:`Distributed.wrap` makes that holds its process
group once more, as the wrapper's last attribute, so that the group's last reference is a
Python one, which leaves the group without holding the GIL.

After :meth:`Distributed.close` (``destroy_process_group``) the DDP wrapper keeps the group
alive, and the wrapper's C++ ``Reducer`` was the group's last owner: the group went when the
wrapper was freed (the context dropped at the script's end), and the Reducer's destructor
runs holding the GIL. A gloo group's destructor waits for its worker threads, and a worker
still finishing a collective (freeing a tensor Python also holds, moments after the
collective returned) needs the GIL: the process hung there for ever, its work done (a rank
whose last collective came a few milliseconds before the context was dropped, or one
descheduled on a busy machine). The wrapper's attributes are released in their order, the
Reducer's before this one; the Python object's release lets go of the GIL while the group
waits for its workers."""


class ConsistencyError(DanluError):
    """Ranks hold different parameters (they drifted apart: a bug or a hardware fault)."""


class Distributed:
    """Rank/world information and the few collectives ``danlu.train`` needs.

    ``Distributed.from_env(env)`` joins the process group torchrun prepared (gloo on CPU,
    NCCL when the model lives on CUDA) with a collective timeout; off torchrun it is the
    single-process version.
    """

    def __init__(
        self,
        rank: int = 0,
        world_size: int = 1,
        local_rank: int = 0,
        device: torch.device | None = None,
        owns_group: bool = False,
    ) -> None:
        self.rank = rank
        self.world_size = world_size
        self.local_rank = local_rank
        self.device = device or torch.device("cpu")
        # Plain attributes, not properties: they are read every step, and once a step's
        # forward/backward has evicted the interpreter from the CPU's caches each call costs
        # microseconds (``device.type``, a call into torch, ~15 us).
        self.enabled = world_size > 1
        """True with more than one worker."""
        self.is_chief = rank == 0
        """Rank 0."""
        self.cuda = self.device.type == "cuda"
        """The model lives on a CUDA device."""
        self._owns_group = owns_group

    @classmethod
    def from_env(
        cls, env: JobEnv, *, backend: str | None = None, timeout_s: float = DEFAULT_TIMEOUT_S
    ) -> Distributed:
        """Join (or reuse) the default process group when ``env`` says we are distributed."""
        if not env.distributed:
            device = torch.device("cuda", 0) if torch.cuda.is_available() else torch.device("cpu")
            return cls(device=device)
        use_cuda = torch.cuda.is_available()
        if use_cuda:
            _check_local_gpu(env.local_rank, torch.cuda.device_count())
        device = torch.device("cuda", env.local_rank) if use_cuda else torch.device("cpu")
        if use_cuda:
            torch.cuda.set_device(device)
        owns = False
        if not dist.is_initialized():
            chosen = backend or ("nccl" if use_cuda else "gloo")
            dist.init_process_group(chosen, timeout=_dt.timedelta(seconds=timeout_s))
            owns = True
        return cls(dist.get_rank(), dist.get_world_size(), env.local_rank, device, owns)

    def _flag_device(self) -> torch.device:
        if self.enabled and dist.get_backend() == "nccl":
            return self.device
        return torch.device("cpu")

    def any(self, flag: bool) -> bool:
        """True when ``flag`` is true on any rank (one tiny all_reduce; local when alone)."""
        if not self.enabled:
            return flag
        t = torch.tensor([1.0 if flag else 0.0], device=self._flag_device())
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return bool(t.item() > 0)

    def sum_floats(self, values: list[float]) -> list[float]:
        """Element-wise sum of ``values`` over ranks."""
        if not self.enabled:
            return list(values)
        t = torch.tensor(values, dtype=torch.float64, device=self._flag_device())
        dist.all_reduce(t)
        return [float(v) for v in t.tolist()]

    def all_gather_object(self, obj: Any) -> list[Any]:
        """Every rank's ``obj``, in rank order."""
        if not self.enabled:
            return [obj]
        out: list[Any] = [None] * self.world_size
        dist.all_gather_object(out, obj)
        return out

    def gather_object(self, obj: Any, dst: int = 0) -> list[Any] | None:
        """Every rank's ``obj``, in rank order, on rank ``dst``; None on the others."""
        if not self.enabled:
            return [obj]
        out: list[Any] | None = [None] * self.world_size if self.rank == dst else None
        dist.gather_object(obj, out, dst=dst)
        return out

    def broadcast_object(self, obj: Any, src: int = 0) -> Any:
        """Rank ``src``'s ``obj`` on every rank."""
        if not self.enabled:
            return obj
        box = [obj]
        dist.broadcast_object_list(box, src=src)
        return box[0]

    def barrier(self) -> None:
        """Wait for every rank."""
        if self.enabled:
            dist.barrier()

    def wrap(self, model: torch.nn.Module, **ddp_kwargs: Any) -> torch.nn.Module:
        """Move ``model`` to this rank's device and wrap it in DDP when distributed."""
        model = model.to(self.device)
        if not self.enabled:
            return model
        from torch.nn.parallel import DistributedDataParallel as DDP

        ids = [self.device.index] if self.cuda else None
        wrapped = DDP(model, device_ids=ids, **ddp_kwargs)
        # after every attribute DDP set: see GROUP_KEEPER
        wrapped.__dict__[GROUP_KEEPER] = wrapped.process_group
        return wrapped

    def sync_buffers(self, model: torch.nn.Module) -> None:
        """Give every rank rank 0's persistent buffers (those of the model's ``state_dict``:
        batch normalisation's running statistics and the like), one broadcast per dtype.

        The ranks' buffers legitimately differ between forward passes (each rank's running
        statistics follow its own samples; DDP's ``broadcast_buffers`` copies rank 0's at the
        start of the next forward), and a checkpoint holds rank 0's. Called before a
        checkpoint, it makes every rank go on from the buffers the checkpoint holds, so a run
        resumed from it is the run that was not interrupted (with DDP's default
        ``broadcast_buffers=True`` the next forward would have copied them anyway)."""
        if not self.enabled:
            return
        module = unwrap(model)
        persistent = module.state_dict(keep_vars=True)
        buffers = [b for name, b in module.named_buffers() if persistent.get(name) is b]
        groups: dict[tuple[torch.dtype, torch.device], list[torch.Tensor]] = {}
        for b in buffers:
            groups.setdefault((b.dtype, b.device), []).append(b)
        with torch.no_grad():
            for (dtype, device), group in groups.items():  # the same order on every rank
                # gloo broadcasts CPU tensors, NCCL the device's; bytes for a bool buffer
                comm = torch.cat([b.reshape(-1) for b in group]).to(self._flag_device())
                dist.broadcast(comm.view(torch.uint8) if dtype == torch.bool else comm, src=0)
                flat = comm.to(device)
                offset = 0
                for b in group:
                    b.copy_(flat[offset : offset + b.numel()].view_as(b))
                    offset += b.numel()

    def check_consistency(self, model: torch.nn.Module) -> str:
        """Hash the parameters and persistent buffers on every rank; raise
        :class:`ConsistencyError` if they differ.

        Buffers such as batch normalisation's running statistics differ between ranks until
        :meth:`sync_buffers` (the training context calls it before each checkpoint, then
        this). Returns the hash (identical on all ranks).
        """
        digest = parameter_hash(model)
        hashes = self.all_gather_object(digest)
        if len(set(hashes)) > 1:
            raise ConsistencyError(f"parameters differ across ranks: {hashes}")
        return digest

    def close(self) -> None:
        """Leave the process group if we created it."""
        if self._owns_group and dist.is_initialized():
            dist.destroy_process_group()
            self._owns_group = False


def _check_local_gpu(local_rank: int, visible: int) -> None:
    """Raise :class:`ConfigError` when worker ``local_rank`` has no GPU of its own among the
    ``visible`` ones: more workers on the node than the job's GPUs. Before, CUDA's
    "invalid device ordinal" came from ``set_device`` or later, deep in a traceback."""
    if local_rank >= visible:
        raise ConfigError(
            f"LOCAL_RANK={local_rank} has no GPU: this process sees {visible} CUDA "
            f"device(s) (CUDA_VISIBLE_DEVICES), one per worker on the node; start at most "
            f"{visible} worker(s) per node (torchrun --nproc-per-node={visible}) or give the "
            "job more GPUs"
        )


def unwrap(model: torch.nn.Module) -> torch.nn.Module:
    """The user's module inside a DDP wrapper (or the module itself).

    Only torch's data-parallel wrappers (``DistributedDataParallel``, ``DataParallel`` and
    FSDP) are unwrapped. Any module with a ``module`` attribute was taken for one: a user's
    model that keeps its backbone as ``self.module`` (or an ``AveragedModel``) was
    checkpointed as that submodule alone, and a resume left the rest of it (a head, say)
    at its fresh initialisation, silently."""
    if isinstance(model, _wrappers()):
        inner = getattr(model, "module", None)
        if isinstance(inner, torch.nn.Module):
            return inner
    return model


def _wrappers() -> tuple[type[torch.nn.Module], ...]:
    """Torch's module classes that wrap the user's module as ``.module``."""
    from torch.nn.parallel import DataParallel, DistributedDataParallel

    found: list[type[torch.nn.Module]] = [DistributedDataParallel, DataParallel]
    try:
        from torch.distributed.fsdp import FullyShardedDataParallel
    except ImportError:  # a torch built without distributed support
        pass
    else:
        found.append(FullyShardedDataParallel)
    return tuple(found)


def parameter_hash(model: torch.nn.Module) -> str:
    """SHA-256 over the names and exact bytes of every parameter and buffer."""
    h = hashlib.sha256()
    for name, t in unwrap(model).state_dict().items():
        h.update(name.encode())
        if isinstance(t, torch.Tensor):
            h.update(t.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()
