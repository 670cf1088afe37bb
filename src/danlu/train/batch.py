"""Batch control: global batch, per-GPU micro-batch, accumulation; adaptive growth.

Vocabulary: the *global batch* ``B`` is the number of samples per optimizer step over all
ranks; each of the ``W`` ranks handles ``B / W`` of them (its *local batch*; when ``B`` does not
divide by ``W`` the first ``B mod W`` ranks take one sample more, so that every step trains on
exactly ``B`` samples) in micro-batches of at most ``micro`` samples, accumulating
``ceil(local / micro)`` gradients. OOM recovery halves ``micro`` (accumulation doubles, ``B``
unchanged); an adaptive schedule changes ``B`` (``micro`` unchanged, accumulation follows).

The first micro-batch comes from, in order: the ``micro_batch`` argument, ``DANLU_BATCH_SIZE``
(the scheduler's choice), the largest safe batch predicted by ``danlu.estimate.memory`` when that
module is installed and a memory limit is known, else the local batch itself.
"""

from __future__ import annotations

import importlib
import math
import sys
from collections.abc import Callable
from numbers import Real
from typing import Any

from danlu.core.errors import ConfigError
from danlu.train.state import stored_count

_SIZES = frozenset(("global_batch", "world_size", "micro"))


class MicroBatchOutOfMemoryError(ConfigError):
    """Out of memory at the smallest micro-batch: OOM recovery cannot halve it further, and
    the job cannot fit the memory it has (a restart with the same memory fails the same way).

    Raised from the out-of-memory error itself (``raise ... from``). Its name and the start of
    its message (``out of memory even at micro-batch N``) are part of the contract: the last
    line of its traceback in the job's log (:data:`danlu.executors.base.CANNOT_FIT_MARK`) is
    how the executors tell this verdict (``Outcome.CANNOT_FIT``) from another out-of-memory
    error (``OutOfMemoryError`` alone: ``Outcome.OOM``), and the control plane ends such a job
    FAILED after this one run, with no restart spent, instead of restarting it with the same
    memory until its ``max_restarts`` run out. A script that catches it and exits in another
    way leaves no verdict: its run is an ordinary failure, restarted."""


def micro_batch_count(samples: int, micro: int, least: int = 1) -> int:
    """How many micro-batches a rank's ``samples`` are cut into: the fewest of at most
    ``micro`` samples each (``ceil(samples / micro)``), unless that would leave one below
    ``least`` samples (a model with batch normalisation needs two); then fewer, larger ones,
    so that every micro-batch holds at least ``least`` (5 samples at ``micro`` 2 and ``least``
    2 are 3 + 2, not 2 + 2 + 1). Never below 1."""
    if samples <= micro:
        return 1
    count = math.ceil(samples / micro)
    if least > 1 and samples // count < least:
        count = max(1, samples // least)
    return count


class BatchController:
    """The current batch configuration of this job (identical on every rank).

    ``global_batch``, ``world_size`` and ``micro`` are set (by the methods below, or
    directly); ``local_batch`` and ``accumulation`` follow them. They are plain attributes,
    recomputed whenever one of the three is assigned, because the training step reads them
    on every step and assignments are rare.
    """

    local_batch: int
    """Samples per optimizer step on the ranks with the largest share:
    ``ceil(global_batch / world_size)``, >= 1 (the others take one fewer when the global batch
    does not divide by the world size: the sampler's window is the global batch)."""
    accumulation: int
    """Micro-steps per optimizer step: ``ceil(local_batch / micro)``, >= 1 (fewer when a
    micro-batch would fall below ``min_micro``: :func:`micro_batch_count`)."""

    def __init__(
        self,
        global_batch: int,
        world_size: int = 1,
        micro: int | None = None,
        *,
        min_micro: int = 1,
    ) -> None:
        if global_batch <= 0:
            raise ConfigError(f"global batch size must be positive, got {global_batch}")
        self.world_size = world_size
        self.global_batch = global_batch
        self.base_global_batch = global_batch
        self.min_micro = min_micro
        self.micro = min(micro or self.local_batch, self.local_batch)
        self.micro_cap = micro or self.micro
        """The largest micro-batch known to fit (the first one, halved by each OOM): the
        micro-batch follows the local batch up to it when the global batch changes."""
        self.launch_cap = self.micro_cap
        """The ceiling this launch chose itself, before any restore: its given micro-batch,
        else its whole local batch (:meth:`load_state_dict` restores up to it)."""
        self.oom_cap: int | None = None
        """The micro-batch the last OOM left (a larger one ran out of memory), or None while
        none did: kept in checkpoints, it caps the micro-batch of every restart."""
        self.micro_limit = micro
        """The micro-batch this launch was given (``micro_batch_size``, ``DANLU_BATCH_SIZE``
        or the memory model's), or None: it replaces a restored checkpoint's micro-batch,
        under an :attr:`oom_cap` (:meth:`load_state_dict`)."""
        self.follows_local = micro is None
        """True while no micro-batch was given and no OOM capped one: a launch's global batch
        (``set_global(..., launch=True)``) is then trained as the whole local batch (before,
        the micro-batch stayed at the script's local batch: a launch at
        ``DANLU_GLOBAL_BATCH_SIZE=32`` over a script's 8 accumulated 4 micro-batches of 8).
        Growth while the job runs (an adaptive batch, a ``Rebatch``) keeps :attr:`micro_cap`:
        a larger micro-batch than ever tried might not fit."""
        self.oom_count = 0

    def __setattr__(self, name: str, value: Any) -> None:
        object.__setattr__(self, name, value)
        if name not in _SIZES:
            return
        state = self.__dict__
        if "global_batch" in state and "world_size" in state:
            local = max(1, math.ceil(state["global_batch"] / state["world_size"]))
            object.__setattr__(self, "local_batch", local)
            if "micro" in state:
                least = state.get("min_micro", 1)
                count = micro_batch_count(local, state["micro"], least)
                object.__setattr__(self, "accumulation", count)

    def on_oom(self, cause: BaseException | None = None) -> None:
        """Halve the micro-batch (accumulation doubles, the global batch stays); at
        :attr:`min_micro` raise :class:`MicroBatchOutOfMemoryError`, chained from ``cause``
        (the out-of-memory error, without its traceback: see
        :class:`~danlu.train.step.StepEngine`)."""
        if self.micro <= self.min_micro:
            raise MicroBatchOutOfMemoryError(
                f"out of memory even at micro-batch {self.micro}, the smallest the OOM "
                "recovery halves to: the model does not fit this GPU's memory limit. Give "
                "the job more GPU memory (on a danlu cluster a larger resources.gpu_memory, "
                "whole GPUs or a GPU type with more memory; elsewhere a higher "
                "DANLU_GPU_MEMORY_LIMIT or a larger GPU), or shrink the model's memory "
                "(mixed precision, activation checkpointing, sharded training)"
            ) from cause
        self.micro = max(self.min_micro, self.micro // 2)
        self.micro_cap = self.micro
        self.oom_cap = self.micro
        self.follows_local = False
        self.oom_count += 1

    def keep_oom_limit(self, oom_cap: int | None, oom_count: int) -> None:
        """After a rollback loaded an older checkpoint's state (:meth:`load_state_dict`): the
        OOM cap and count the run had before it (``oom_cap``, ``oom_count``) still hold. The
        tighter of the two caps limits the micro-batch (the memory did not grow by rolling
        back: the replay would run out of it again, and under DDP an OOM in the last
        backward cannot be retried), and no OOM is forgotten."""
        self.oom_count = max(self.oom_count, oom_count)
        if oom_cap is None or (self.oom_cap is not None and self.oom_cap <= oom_cap):
            return
        self.oom_cap = oom_cap
        self.micro_cap = min(self.micro_cap, oom_cap)
        self.micro = min(self.micro, oom_cap)
        self.follows_local = False

    def set_global(self, global_batch: int, *, launch: bool = False) -> None:
        """Change the global batch (adaptive batch size); the micro-batch is the local batch,
        up to :attr:`micro_cap` (accumulation covers the rest). ``launch``: the batch this
        run was launched with (``DANLU_GLOBAL_BATCH_SIZE``), trained as the whole local batch
        while :attr:`follows_local`."""
        self.global_batch = max(1, int(global_batch))
        if launch and self.follows_local:
            self.micro_cap = self.local_batch
        self.micro = min(self.micro_cap, self.local_batch)

    def set_world_size(self, world_size: int) -> None:
        """Resize: the global batch stays, the local batch follows."""
        self.world_size = max(1, world_size)
        self.micro = min(self.micro_cap, self.local_batch)

    def state_dict(self) -> dict[str, Any]:
        """Resumable state."""
        return {
            "global_batch": self.global_batch,
            "micro": self.micro,
            "micro_cap": self.micro_cap,
            "oom_cap": self.oom_cap,
            "oom_count": self.oom_count,
            "base_global_batch": self.base_global_batch,
            "follows_local": self.follows_local,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict` output (the world size may have changed meanwhile):
        :meth:`parse_state_dict`'s checks, then the load. Nothing is changed when it raises.

        The global batch is the checkpoint's. Of its micro-batch only a cap learned from an
        OOM (:attr:`oom_cap`) holds: it limits this launch's micro-batch, which otherwise
        replaces the checkpoint's. A micro-batch the launch was given (:attr:`micro_limit`:
        ``micro_batch_size``, ``DANLU_BATCH_SIZE``, the memory model's; a new GPU, a new
        memory limit) is used as it is; without one the ceiling is the larger of the
        checkpoint's and this launch's whole local batch, so the micro-batch follows the
        new local batch after a resize (a checkpoint's micro-batch of 4 on 3 ranks of a
        global batch of 12 used to stay 4 on 2 ranks and on one, accumulating 2 and 3), and
        one the run grew to while it ran (a launch batch) is kept. A checkpoint written
        before :attr:`oom_cap` was kept has an OOM's cap when it counted an OOM."""
        self.parse_state_dict(state)()

    def parse_state_dict(self, state: dict[str, Any]) -> Callable[[], None]:
        """Check :meth:`state_dict` output and return the function that loads it (see
        :meth:`load_state_dict`), which cannot fail; nothing is changed until it is called.

        ``ValueError`` names a size no run writes: a batch or cap below 1, a negative OOM
        count, a bool or a fraction (a micro-batch cap of 0 divided by zero; a negative
        global batch trained one sample a step), a global batch beyond the float range (the
        load raised a bare ``OverflowError`` once it had set part of the state); ``KeyError`` a
        size it lacks."""
        global_batch = stored_count(state["global_batch"], "the batch state's global_batch", 1)
        if global_batch > sys.float_info.max:  # its local batch (a float division) raised
            raise ValueError(
                f"the batch state's global_batch (a whole number of {global_batch.bit_length()} "
                "bits) is beyond the float range"
            )
        base = state.get("base_global_batch", global_batch)
        base_global_batch = stored_count(base, "the batch state's base_global_batch", 1)
        oom_count = stored_count(state.get("oom_count", 0), "the batch state's oom_count")
        saved_cap = stored_count(
            state.get("micro_cap", state["micro"]), "the batch state's micro_cap", 1
        )
        if "oom_cap" in state:
            saved_oom = state["oom_cap"]
            oom_cap = (
                None
                if saved_oom is None
                else stored_count(saved_oom, "the batch state's oom_cap", 1)
            )
        else:  # written before the OOM's cap was kept apart: on_oom set micro_cap
            oom_cap = saved_cap if oom_count > 0 else None

        def load() -> None:
            limit = self.micro_limit
            self.global_batch, self.base_global_batch = global_batch, base_global_batch
            self.oom_count = oom_count
            self.oom_cap = oom_cap
            if limit is None:
                cap = max(saved_cap, self.launch_cap) if oom_cap is None else oom_cap
            else:
                cap = limit if oom_cap is None else min(oom_cap, limit)
            self.micro_cap = cap
            self.micro = min(cap, self.local_batch)
            # a learned cap is not lifted by a launch batch; nor is a goodput tuner's (its
            # context cleared this flag before the restore)
            self.follows_local = self.follows_local and oom_cap is None

        return load


MEMORY_MARGIN = 0.05
"""Share of the memory limit kept free when the micro-batch comes from a memory model
(``danlu.estimate.optimize.SPARE_SHARE``, restated: ``danlu.train`` imports only torch)."""


def estimated_micro_batch(
    memory_model: Any, limit_bytes: int | None, upper: int | None = None
) -> int | None:
    """The largest micro-batch ``b <= upper`` whose predicted peak fits ``limit_bytes`` less a
    :data:`MEMORY_MARGIN` share, by ``danlu.estimate.optimize.largest_safe_batch`` over
    ``memory_model`` (``danlu.estimate``'s ``MemoryModel``: ``predict(b)`` and
    ``max_batch(limit, margin)``, e.g. from ``danlu.estimate.memory.fit_memory_model``).

    None when there is no model or no limit, when ``danlu.estimate`` is not installed
    (``danlu.train`` needs only torch), when not even one sample fits, or when the model
    fails: an estimate is a hint, and the OOM guard still halves a micro-batch that does not
    fit."""
    if memory_model is None or limit_bytes is None:
        return None
    try:
        optimize = importlib.import_module("danlu.estimate.optimize")
    except ImportError:
        return None
    try:
        b = optimize.largest_safe_batch(memory_model, limit_bytes, upper, MEMORY_MARGIN)
    except Exception:  # a failing estimate must not stop training
        return None
    return int(b) if isinstance(b, int | float) and b >= 1 else None


class PowerSchedule:
    """B(t) = B0 * (1 + t / T) ** alpha (seed 000 section 4.2), rounded down to a multiple of
    ``multiple`` and clamped to ``[B0, max_batch]`` (a ``max_batch`` below ``B0`` is a
    :class:`ConfigError`: the batch it gave shrank from the first step)."""

    def __init__(
        self,
        b0: int,
        total_steps: int,
        alpha: float = 1.0,
        max_batch: int | None = None,
        multiple: int = 1,
    ) -> None:
        b0 = _setting(b0, "b0", 1)
        total_steps = _setting(total_steps, "total_steps", 1)
        if isinstance(alpha, bool) or not isinstance(alpha, Real) or not math.isfinite(alpha):
            # NaN made every batch int(nan): a raw ValueError at the first step
            raise ConfigError(f"adaptive batch: alpha must be a finite number; got {alpha!r}")
        self.b0: int = b0
        self.total: int = total_steps
        self.alpha: float = float(alpha)
        self.max_batch: int = b0 * 2**30 if not max_batch else _setting(max_batch, "max_batch", 1)
        if self.max_batch < b0:  # the clamp gave max_batch from step 0: the batch shrank
            raise ConfigError(
                f"adaptive batch: max_batch ({self.max_batch}) must be >= b0 ({b0}), the "
                "batch the run starts at; raise max_batch or lower b0"
            )
        self.multiple: int = max(1, _setting(multiple, "multiple", 0))

    def __call__(self, step: int) -> int:
        try:
            raw = self.b0 * (1.0 + step / self.total) ** self.alpha
            b = int(raw // self.multiple) * self.multiple
        except OverflowError:  # beyond the float range (a large alpha, long past total_steps)
            return self.max_batch
        return int(min(max(b, self.b0), self.max_batch))


def _setting(value: Any, what: str, least: int) -> int:
    """``value`` of the adaptive batch's argument ``what`` as an int (see
    :func:`~danlu.train.state.stored_count`); :class:`ConfigError` naming it otherwise."""
    try:
        return stored_count(value, f"adaptive batch: {what}", least)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


class GradientNoiseScale:
    """Gradient noise scale B_noise = tr(Sigma) / |G|^2 (McCandlish et al., 2018), from the
    squared gradient norms at two batch sizes ``b < B`` (one micro-batch and the whole
    accumulated batch), smoothed by an exponential moving average."""

    def __init__(self, beta: float = 0.9) -> None:
        if isinstance(beta, bool) or not isinstance(beta, Real) or not 0 <= beta < 1:
            # NaN made every estimate NaN; 1 never moved it; above 1 it diverged
            raise ConfigError(
                f"the gradient-noise average's beta must be a number in [0, 1); got {beta!r}"
            )
        self.beta: float = beta
        self.sigma2: float = 0.0  # tr(Sigma): per-sample gradient variance
        self.mu2: float = 0.0  # |G|^2
        self.count: int = 0

    def update(self, small_sq: float, small_n: int, big_sq: float, big_n: int) -> None:
        """Feed ``|g_b|^2`` at batch ``small_n`` and ``|g_B|^2`` at batch ``big_n``. A step
        whose estimate overflows (norms near the float range: ``inf - inf`` is NaN) is
        ignored, as one with a non-finite norm is: kept, it stayed in the average for good,
        and the AdaScale LR of the next batch change raised on it."""
        if big_n <= small_n or not (math.isfinite(small_sq) and math.isfinite(big_sq)):
            return
        mu2 = (big_n * big_sq - small_n * small_sq) / (big_n - small_n)
        sigma2 = (small_sq - big_sq) / (1.0 / small_n - 1.0 / big_n)
        b = self.beta if self.count else 0.0
        mu2 = b * self.mu2 + (1 - b) * mu2
        sigma2 = b * self.sigma2 + (1 - b) * sigma2
        if not (math.isfinite(mu2) and math.isfinite(sigma2)):
            return
        self.mu2, self.sigma2 = mu2, sigma2
        self.count += 1

    def state_dict(self) -> dict[str, float | int]:
        """The estimate so far (part of a checkpoint's ``data_state``)."""
        return {"sigma2": self.sigma2, "mu2": self.mu2, "count": self.count}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume from :meth:`state_dict` output: :meth:`parse_state_dict`'s checks, then the
        load. Nothing is changed when it raises."""
        self.parse_state_dict(state)()

    def parse_state_dict(self, state: dict[str, Any]) -> Callable[[], None]:
        """Read :meth:`state_dict` output and return the function that loads it, which cannot
        fail; nothing is changed until it is called. An estimate that is not finite (a
        damaged checkpoint: :meth:`update` never keeps one) is left out: the run estimates
        again. A value that is no number is a ``ValueError``/``TypeError``, a missing one a
        ``KeyError``."""
        sigma2, mu2 = float(state["sigma2"]), float(state["mu2"])
        count = int(state["count"])
        if not (math.isfinite(sigma2) and math.isfinite(mu2)):
            sigma2 = mu2 = 0.0
            count = 0

        def load() -> None:
            self.sigma2, self.mu2, self.count = sigma2, mu2, count

        return load

    @property
    def noise_scale(self) -> float | None:
        """Current B_noise estimate, or None before a usable estimate."""
        if self.count == 0 or self.mu2 <= 0 or self.sigma2 <= 0:
            return None
        return self.sigma2 / self.mu2


ADAPTIVE_MODES = ("schedule", "gns", "goodput")


class AdaptiveBatch:
    """Decides the global batch each step: a :class:`PowerSchedule` (``"schedule"``), growth
    towards the gradient noise scale, never shrinking (``"gns"``), both in ``[b0, max_batch]``
    multiples of ``multiple``; or (``"goodput"``) every ``every`` steps the batch in
    ``[b0, max_batch]`` with the most goodput on the job's GPUs, from its own step times and
    gradient noise (:mod:`danlu.train.goodput`; the job then reports ``adaptive`` and the
    ``danlu`` scheduler leaves its batch to it). Use ``lr_scaling="adascale"`` with it."""

    def __init__(
        self,
        mode: str,
        b0: int,
        *,
        total_steps: int = 1,
        alpha: float = 1.0,
        max_batch: int | None = None,
        multiple: int = 1,
        gns: GradientNoiseScale | None = None,
        every: int = 50,
    ) -> None:
        # case and surrounding blanks do not matter ("GNS"), as for the precision's name
        name = mode.strip().lower() if isinstance(mode, str) else None
        if name is None or name not in ADAPTIVE_MODES:
            raise ConfigError(
                f"adaptive batch mode must be one of {', '.join(ADAPTIVE_MODES)} (in any "
                f"case), got {mode!r}"
            )
        self.mode = name
        self.every = _setting(every, "every", 1)  # NaN: never adapted (step % nan is nan)
        self.b0 = _setting(b0, "b0", 1)
        self.schedule = PowerSchedule(self.b0, total_steps, alpha, max_batch or b0 * 64, multiple)
        self.multiple, self.max_batch = self.schedule.multiple, self.schedule.max_batch
        self.gns = gns or GradientNoiseScale()

    def target(self, step: int, current: int) -> int:
        """The global batch to use at ``step`` (modes ``"schedule"`` and ``"gns"``; the
        ``"goodput"`` mode decides in the training context, from measurements)."""
        if self.mode == "goodput":
            return current
        if self.mode == "schedule":
            return self.schedule(step)
        noise = self.gns.noise_scale
        if noise is None:
            return current
        b = int(min(max(noise, current), self.max_batch) // self.multiple) * self.multiple
        return max(current, b)


BatchHook = Callable[[int, int], None]
"""``hook(old_global_batch, new_global_batch)``: called when the global batch changes."""
