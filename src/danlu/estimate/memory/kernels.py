"""Allocations a tensor-level trace cannot see (imports torch: tracer subprocess only).

Under FakeTensorMode each aten op is one step: its outputs appear, but not the buffers the real
kernel allocates while it runs. Two targets:

* ``cpu``: for ops whose CPU kernels allocate internal buffers (oneDNN convolutions reorder
  inputs, weights and outputs into blocked layouts; batch-norm backward, flash attention and
  pooling keep per-thread scratch), run the real kernel once per distinct signature on zeros of
  the same shapes under the profiler and record its in-kernel peak above its outputs.
* ``cuda``: mark sites where a GPU allocates through the caching allocator (cuDNN
  workspaces, attention-backward accumulators); the allocator model sizes them per GPU type.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.utils._pytree import tree_flatten, tree_map

PROBED_OPS: frozenset[str] = frozenset(
    {
        "convolution",
        "_convolution",
        "convolution_backward",
        "mkldnn_convolution",
        "native_batch_norm",
        "native_batch_norm_backward",
        "_native_batch_norm_legit",
        "_native_batch_norm_legit_functional",
        "_native_batch_norm_legit_no_training",
        "native_layer_norm",
        "native_layer_norm_backward",
        "native_group_norm",
        "native_group_norm_backward",
        "_adaptive_avg_pool2d",
        "_adaptive_avg_pool2d_backward",
        "max_pool2d_with_indices",
        "max_pool2d_with_indices_backward",
        "avg_pool2d",
        "avg_pool2d_backward",
        "_scaled_dot_product_flash_attention_for_cpu",
        "_scaled_dot_product_flash_attention_for_cpu_backward",
        "embedding_dense_backward",
        "_embedding_bag",
        "_embedding_bag_backward",
    }
)
"""aten ops (overload packet names) whose real CPU kernels are probed for internal buffers."""

CONV_OPS = frozenset({"convolution", "_convolution", "convolution_backward"})
ATTN_BWD_OPS = frozenset({"_scaled_dot_product_flash_attention_for_cpu_backward"})
MATMUL_OPS = frozenset({"mm", "addmm", "bmm", "baddbmm", "addbmm", "mv", "addmv", "_scaled_mm"})


def op_name(func: Any) -> str:
    """The overload packet name of an aten op (``convolution_backward``)."""
    return str(getattr(func, "__name__", func)).split(".")[0]


def _signature(args: Any, kwargs: Any) -> str:
    def key(x: Any) -> Any:
        if isinstance(x, torch.Tensor):
            return ("T", tuple(x.shape), tuple(x.stride()), str(x.dtype))
        return repr(x)

    return repr((tree_map(key, args), tree_map(key, kwargs)))


def _storage_bytes(out: Any) -> int:
    seen: dict[int, int] = {}
    for t in tree_flatten(out)[0]:
        if isinstance(t, torch.Tensor):
            st = t.untyped_storage()
            # the storage's own handle: shared by views, and readable on the fake tensors
            # of a traced GPU step (their data pointers are not)
            seen[st._cdata] = st.nbytes()
    return sum(seen.values())


class CpuProbe:
    """Measures, once per signature, a real CPU kernel's internal peak above its outputs."""

    def __init__(self, limit_bytes: int) -> None:
        self.limit_bytes = limit_bytes
        self.cache: dict[str, int] = {}
        self.skipped: set[str] = set()
        self.failed: set[str] = set()

    def workspace(self, func: Any, args: Any, kwargs: Any) -> int:
        """Bytes the real kernel holds beyond its outputs at its in-kernel peak."""
        from torch._subclasses.fake_tensor import unset_fake_temporarily

        sig = op_name(func) + _signature(args, kwargs)
        if sig in self.cache:
            return self.cache[sig]
        flat = [t for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)]
        need = sum(t.untyped_storage().nbytes() for t in flat)
        if need > self.limit_bytes:
            self.skipped.add(op_name(func))
            self.cache[sig] = 0
            return 0
        with unset_fake_temporarily(), torch.no_grad():

            def real(x: Any) -> Any:
                if isinstance(x, torch.Tensor):
                    return torch.empty_strided(
                        tuple(x.shape), tuple(x.stride()), dtype=x.dtype
                    ).zero_()
                return x

            rargs, rkwargs = tree_map(real, args), tree_map(real, kwargs)
            if op_name(func) == "native_batch_norm_backward" and rargs[2] is not None:
                # the meta kernel gives mixed-precision save_mean/invstd the input's dtype;
                # the CPU kernel keeps them in the parameters' dtype
                rargs = list(rargs)
                for i in (5, 6):
                    if isinstance(rargs[i], torch.Tensor):
                        rargs[i] = rargs[i].to(rargs[2].dtype)
            try:
                peak = self._profile(func, rargs, rkwargs)
            except RuntimeError as exc:
                self.failed.add(f"{op_name(func)} ({exc})")
                peak = 0
        self.cache[sig] = peak
        return peak

    @staticmethod
    def _profile(func: Any, args: Any, kwargs: Any) -> int:
        from torch._C._profiler import _EventType
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
            out = func(*args, **kwargs)
        allocs: list[tuple[int, int]] = []
        stack = list(prof.profiler.kineto_results.experimental_event_tree())
        while stack:
            node = stack.pop()
            if node.tag == _EventType.Allocation:
                allocs.append((node.start_time_ns, node.extra_fields.alloc_size))
            stack.extend(node.children)
        allocs.sort()
        live = peak = 0
        for _, size in allocs:
            live += size
            peak = max(peak, live)
        return max(0, peak - _storage_bytes(out))


def cuda_site(func: Any, args: Any, out: Any) -> tuple[str, int] | None:
    """A GPU-only allocation site at this op, as ``(kind, hint_bytes)``, or None."""
    name = op_name(func)
    if name in CONV_OPS:
        return "conv", _storage_bytes(out)
    if name in ATTN_BWD_OPS:
        q = args[1]
        b, h, s = q.shape[0], q.shape[1], q.shape[2]
        return "attn_bwd", q.numel() * 4 + b * h * s * 4
    return None
