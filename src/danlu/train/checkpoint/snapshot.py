"""Host snapshots of live tensors for asynchronous checkpoints.

A checkpoint must hold the state *at its step*, while training goes on. The snapshot copies
the live tensors into reused host buffers (pinned for CUDA sources; reused so that no page
is faulted in after the first checkpoint). Two ways:

* **now** (:meth:`HostSnapshot.copy_now`): the caller waits for the copy. Used for tensors
  that may change at any time (model buffers, which the next forward pass updates), for
  CUDA tensors, and whenever nothing guards the live tensors.
* **deferred** (:meth:`HostSnapshot.start_deferred`): the copy runs in the checkpoint's
  background thread, overlapping the next forward and backward passes, and the *next
  optimizer step* waits for it: a step pre-hook (``Optimizer.register_step_pre_hook``) on
  each guarding optimizer blocks until the copy is done. Parameters and optimizer state
  change only in ``optimizer.step()``, so they are copied before anything modifies them.
  The copy is a single-threaded ``memcpy`` per tensor (numpy, GIL released), so it never
  competes with torch's intra-op thread pool for more than one core.

``wait_s`` accumulates the seconds optimizer steps spent waiting for a deferred copy: with
the time :meth:`CheckpointManager.save` itself blocks, this is the training stall.
"""

from __future__ import annotations

import threading
import time
import weakref
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np
import torch


def _byte_view(t: torch.Tensor) -> np.ndarray | None:
    """A numpy ``uint8`` view of a contiguous CPU tensor's bytes (None if impossible)."""
    if t.device.type != "cpu" or not t.is_contiguous() or t.is_sparse or t.is_quantized:
        return None
    flat = t.detach().reshape(-1)
    if flat.dtype.is_complex:
        flat = torch.view_as_real(flat).reshape(-1)
    if flat.numel() == 0:
        return np.empty(0, dtype=np.uint8)
    try:
        return flat.view(torch.uint8).numpy()
    except (RuntimeError, TypeError):
        return None


class HostSnapshot:
    """Reused host buffers and the deferred-copy protocol; see the module docstring."""

    def __init__(self) -> None:
        self._staging: dict[str, torch.Tensor] = {}
        # optimizer -> its hook's handle; weak, so an optimizer that is freed drops out (an
        # id() key stayed, and a new optimizer given the freed address was never hooked)
        self._hooks: weakref.WeakKeyDictionary[torch.optim.Optimizer, Any] = (
            weakref.WeakKeyDictionary()
        )
        self._done: threading.Event | None = None
        self._lock = threading.Lock()
        self.wait_s = 0.0
        """Seconds optimizer steps waited for deferred copies (cumulative)."""

    def _buffer(self, key: str, t: torch.Tensor) -> torch.Tensor:
        buf = self._staging.get(key)
        if buf is None or buf.shape != t.shape or buf.dtype != t.dtype:
            pin = t.device.type == "cuda"
            buf = torch.empty(t.shape, dtype=t.dtype, device="cpu", pin_memory=pin)
            self._staging[key] = buf
        return buf

    def _forget_others(self, keys: Iterable[str]) -> None:
        for key in set(self._staging) - set(keys):
            del self._staging[key]

    def copy_now(self, tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Copy ``tensors`` into the host buffers before returning them."""
        out: dict[str, torch.Tensor] = {}
        cuda = False
        for key, t in tensors.items():
            buf = self._buffer(key, t)
            buf.copy_(t.detach(), non_blocking=t.device.type == "cuda")
            cuda = cuda or t.device.type == "cuda"
            out[key] = buf
        self._forget_others(tensors)
        if cuda:
            torch.cuda.synchronize()
        return out

    @staticmethod
    def deferrable(tensors: dict[str, torch.Tensor]) -> bool:
        """True when every tensor can be copied by :meth:`start_deferred` (CPU, contiguous)."""
        return all(_byte_view(t) is not None for t in tensors.values())

    def start_deferred(
        self, tensors: dict[str, torch.Tensor], guards: Iterable[torch.optim.Optimizer]
    ) -> tuple[dict[str, torch.Tensor], Callable[[], None]]:
        """Prepare a deferred snapshot of ``tensors`` (all :meth:`deferrable`).

        Returns the host buffers (filled once the copy ran) and the copy function, to be
        called exactly once from a background thread. Until it returns, every optimizer in
        ``guards`` blocks at the start of its next ``step()``.
        """
        pairs = [(self._buffer(k, t), t) for k, t in tensors.items()]
        self._forget_others(tensors)
        done = threading.Event()
        with self._lock:
            self._done = done
        for opt in guards:
            self._guard(opt)

        def copy() -> None:
            try:
                for buf, src in pairs:
                    dst, view = _byte_view(buf), _byte_view(src)
                    assert dst is not None and view is not None
                    np.copyto(dst, view)
            finally:
                done.set()

        return {k: buf for k, (buf, _) in zip(tensors, pairs, strict=True)}, copy

    def _guard(self, opt: torch.optim.Optimizer) -> None:
        if opt in self._hooks:
            return
        ref = weakref.ref(self)

        def before_step(optimizer: Any, args: Any, kwargs: Any) -> None:
            snap = ref()
            if snap is not None:
                snap.wait()

        self._hooks[opt] = opt.register_step_pre_hook(before_step)

    @property
    def pending(self) -> bool:
        """True while a deferred copy has not finished."""
        done = self._done
        return done is not None and not done.is_set()

    def wait(self) -> None:
        """Block until the deferred copy (if any) is done; the time counts in ``wait_s``."""
        done = self._done
        if done is None:
            return
        if not done.is_set():
            t0 = time.perf_counter()
            done.wait()
            self.wait_s += time.perf_counter() - t0
        with self._lock:
            if self._done is done:
                self._done = None

    def close(self) -> None:
        """Remove the optimizer hooks and release the buffers."""
        self.wait()
        for handle in list(self._hooks.values()):
            handle.remove()
        self._hooks.clear()
        self._staging.clear()
