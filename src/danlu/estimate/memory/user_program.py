"""What the tracer says about the user's program beyond its figures (imports torch: tracer
subprocess only): the parts of it that are ``torch.compile``'d (traced as their eager
program), an autocast of its own that differs from the precision estimated for, and a
program that exits (``sys.exit``, an argument parser) or reads a file that is not there,
each a :class:`SpecError` on ``MODEL_REF`` saying what to change in place of the bare
failure of the tracer subprocess.
"""

from __future__ import annotations

import contextlib
import os
import sys
import sysconfig
import traceback
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

from danlu.core.errors import SpecError

# -- torch.compile ---------------------------------------------------------------------------


def _compiled_function(fn: object) -> bool:
    """Whether ``fn`` is a function (or a bound method) that ``torch.compile`` wrapped."""
    return getattr(fn, "_torchdynamo_orig_callable", None) is not None


def _compiled_module(module: torch.nn.Module) -> bool:
    """Whether ``module`` is ``torch.compile(net)`` (dynamo's ``OptimizedModule``), was
    compiled in place (``net.compile()``), or has a compiled ``forward`` (``@torch.compile``
    on its class's method, or ``net.forward = torch.compile(net.forward)``)."""
    from torch._dynamo.eval_frame import OptimizedModule

    return (
        isinstance(module, OptimizedModule)
        or getattr(module, "_compiled_call_impl", None) is not None
        or _compiled_function(getattr(module, "forward", None))
    )


def compiled_parts(model: torch.nn.Module, make_batch: object, loss_fn: object) -> list[str]:
    """The parts of the traced program that are ``torch.compile``'d, in words: ``the
    model``, a submodule (``the model's 'encoder.0'``; what a compiled module holds is not
    named again), ``loss_fn``, ``make_batch``. Empty when none is.

    Under the tracer's dispatch mode dynamo compiles nothing: every part runs as its eager
    program, and the figures are the eager step's. A compiled function the model calls from
    its ``forward`` (a fused activation) cannot be seen from outside and is not named."""
    parts: list[str] = []
    named: list[str] = []  # the compiled modules' names: what they hold is theirs
    for name, module in model.named_modules():
        if any(name.startswith(f"{held}.") for held in named) or "" in named:
            continue
        if _compiled_module(module):
            named.append(name)
            shown = name.replace("_orig_mod.", "")
            parts.append("the model" if not name else f"the model's {shown!r}")
    for label, fn in (("loss_fn", loss_fn), ("make_batch", make_batch)):
        if _compiled_function(fn):
            parts.append(label)
    return parts


def compiled_warning(parts: list[str]) -> str:
    """The trace's warning for a program whose ``parts`` are ``torch.compile``'d
    (:func:`compiled_parts`): what was compiled and how the figures were made."""
    return (
        f"torch.compile'd: {', '.join(parts)}; traced as the eager program (torch.compile "
        "does not run under the tracer): the compiled step's fused kernels often keep fewer "
        "activations, so its peak may be lower than this"
    )


# -- the step's own autocast -----------------------------------------------------------------

_PRECISION_OF_DTYPE: dict[torch.dtype | None, str] = {
    None: "fp32",
    torch.float32: "fp32",
    torch.float16: "fp16",
    torch.bfloat16: "bf16",
}


def _precision_of(dtype: torch.dtype | None) -> str:
    """The ``--precision`` name of an autocast's dtype (``None``: no autocast, fp32)."""
    return _PRECISION_OF_DTYPE.get(dtype, str(dtype).removeprefix("torch."))


class AutocastWatch:
    """The autocasts the traced step enters, and what its modules compute under.

    While :meth:`watching`, every ``torch.autocast`` (``torch.amp.autocast``,
    ``torch.cuda.amp.autocast``...) entered is recorded as it was asked for, CUDA's too:
    on a machine without a GPU torch turns a CUDA autocast off with a warning, so the step
    computes in fp32 there while on the GPU it would not. At each layer's forward the
    innermost autocast asked for is what the GPU would compute the layer under; when no
    layer computes under the precision estimated for, :meth:`warning` says so."""

    def __init__(self, precision: str) -> None:
        from danlu.estimate.memory.steps import autocast_dtype

        self.precision = precision
        self.expected = autocast_dtype(precision)
        self.stack: list[tuple[str, torch.dtype | None]] = []
        """The autocasts entered and not left, outermost first: (device, dtype or None when
        asked for with ``enabled=False``)."""
        self.seen: dict[tuple[str, torch.dtype | None], str] = {}
        """A module's forward under an innermost autocast other than the expected, by that
        autocast: the first such module's class name."""
        self.traced_under: dict[tuple[str, torch.dtype | None], torch.dtype | None] = {}
        """What the trace computed in (the innermost CPU autocast's dtype) there."""
        self.active = False
        self.expected_seen = False
        """Whether a layer computed under the expected autocast."""

    @contextlib.contextmanager
    def watching(self) -> Iterator[None]:
        """Record the autocasts entered from here on (torch restored after), and the
        forwards of modules while :meth:`recording`."""
        from torch.amp.autocast_mode import autocast

        init, enter, exit_ = autocast.__init__, autocast.__enter__, autocast.__exit__
        stack = self.stack

        def asked_init(ctx: autocast, device_type: str, *args: Any, **kwargs: Any) -> None:
            init(ctx, device_type, *args, **kwargs)
            enabled = kwargs.get("enabled", args[1] if len(args) > 1 else True)
            ctx._danlu_asked = (device_type, ctx.fast_dtype if enabled else None)  # type: ignore[attr-defined]

        def asked_enter(ctx: autocast) -> Any:
            out = enter(ctx)  # type: ignore[no-untyped-call]
            asked = getattr(ctx, "_danlu_asked", None)
            stack.append(asked or (ctx.device, ctx.fast_dtype if ctx._enabled else None))
            return out

        def asked_exit(ctx: autocast, *args: Any) -> Any:
            if stack:
                stack.pop()
            return exit_(ctx, *args)

        autocast.__init__ = asked_init  # type: ignore[method-assign,assignment]
        autocast.__enter__ = asked_enter  # type: ignore[method-assign]
        autocast.__exit__ = asked_exit  # type: ignore[method-assign]
        hook = torch.nn.modules.module.register_module_forward_pre_hook(self._forward_seen)
        try:
            yield
        finally:
            hook.remove()
            autocast.__init__ = init  # type: ignore[method-assign]
            autocast.__enter__ = enter  # type: ignore[method-assign]
            autocast.__exit__ = exit_  # type: ignore[method-assign]
            stack.clear()

    @contextlib.contextmanager
    def recording(self) -> Iterator[None]:
        """Note the autocast of every module's forward (within :meth:`watching`): around
        the training step, whose autocast is the precision's (the factory's calls of its
        model are not the step's)."""
        self.active = True
        try:
            yield
        finally:
            self.active = False

    def _forward_seen(self, module: torch.nn.Module, args: Any) -> None:
        """A module's forward pre-hook: the innermost autocast a layer (a module holding no
        other) computes under, when it is not the expected one."""
        if not self.active or next(module.children(), None) is not None:
            return
        under = self.stack[-1] if self.stack else ("cpu", None)
        if under[1] == self.expected:
            self.expected_seen = True
        elif under not in self.seen:
            self.seen[under] = type(module).__name__
            cpu = [dtype for device, dtype in self.stack if device == "cpu"]
            self.traced_under[under] = cpu[-1] if cpu else None

    def warning(self) -> str | None:
        """What the step computes under where it is not the precision estimated for, and
        what the figures are then (None: the step computes as estimated). Said only when
        no layer computed as estimated: a model may turn autocast off for a few layers
        (rotary embeddings, a norm) on purpose."""
        if not self.seen or self.expected_seen:
            return None
        (device, dtype), module = next(iter(self.seen.items()))
        step = _precision_of(dtype)
        what = (
            f"turns autocast off (at a {module})"
            if dtype is None
            else f"enters torch.autocast({device!r}, dtype={dtype}) itself (at a {module})"
        )
        traced = _precision_of(self.traced_under[(device, dtype)])
        if traced == step:
            figures = f"these figures follow the step ({step})"
        else:  # a CUDA autocast, off where the tracer runs
            figures = (
                f"the tracer runs on the CPU, where a CUDA autocast does nothing, so these "
                f"figures are {traced}'s, not the {step} the step computes in on a GPU"
            )
        return (
            f"the step {what} while the estimate is for precision {self.precision}: "
            f"{figures}; give --precision {step} (a job: training.precision: {step}) to "
            "estimate the step as it runs"
        )


# -- programs that exit or read files ------------------------------------------------------

_NOT_USER_CODE = tuple(
    str(Path(p).resolve())
    for p in (
        sysconfig.get_paths()["stdlib"],
        Path(torch.__file__).parent,
        Path(__file__).resolve().parents[2],  # danlu
    )
)


def user_frame(exc: BaseException) -> str:
    """Where in the user's code ``exc`` was raised, as ``FILE, line N``: the innermost
    frame outside the standard library, torch and danlu (``parse_args()`` in the factory,
    not argparse's ``exit``); the innermost frame when none is."""
    frames, own = _frames(exc)
    if not frames:
        return "where not known"
    frame = (own or frames)[-1]
    return f"{frame.filename}, line {frame.lineno}"


def _frames(
    exc: BaseException,
) -> tuple[list[traceback.FrameSummary], list[traceback.FrameSummary]]:
    """The frames of ``exc``'s traceback in files, and those of them in the user's code
    (outside the standard library, torch and danlu), innermost last."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if not f.filename.startswith("<")]
    own = [f for f in frames if not str(Path(f.filename).resolve()).startswith(_NOT_USER_CODE)]
    return frames, own


def failure_words(exc: BaseException) -> str:
    """``exc`` as the trace's failure says it: ``TYPE: message``, with where in the user's
    code it was raised (``(at FILE, line N, in FUNCTION)``: the innermost frame outside the
    standard library, torch and danlu) when a frame of it is in the traceback. A forward
    failing on the batch (a shape mismatch) was said with torch's message and the last
    lines of a traceback inside torch, the user's line cut off above them."""
    words = f"{type(exc).__name__}: {exc}"
    _, own = _frames(exc)
    if own:
        words += f" (at {own[-1].filename}, line {own[-1].lineno}, in {own[-1].name})"
    return words


@contextlib.contextmanager
def exit_refused(model_ref: str) -> Iterator[None]:
    """A :class:`SpecError` on ``MODEL_REF`` when the user's code exits (``sys.exit``, an
    argument parser missing an argument, ``exit()``) while the tracer imports its module or
    runs its factory, ``make_batch`` or ``loss_fn``: the tracer subprocess ended without an
    answer ("the tracer exited with status 0"), with argparse's usage of ``trace_worker.py``
    at best."""
    try:
        yield
    except SystemExit as exc:
        code = exc.code
        parser = " (an argument parser exits so on a missing argument)" if code == 2 else ""
        raise SpecError(
            "MODEL_REF",
            f"{model_ref} exits (SystemExit({code!r}){parser}, at {user_frame(exc)}): the "
            "tracer imports the module and runs its factory, make_batch and loss_fn in a "
            f"process of its own, with no command-line arguments (sys.argv is "
            f"{sys.argv[:1]!r}); parse arguments and exit only under "
            "`if __name__ == '__main__':`, and give the factory what it needs as defaults",
        ) from None


@contextlib.contextmanager
def missing_files_refused(model_ref: str) -> Iterator[None]:
    """A :class:`SpecError` on ``MODEL_REF`` when the factory, ``make_batch`` or ``loss_fn``
    cannot open a file (a data set, a tokenizer, a checkpoint): the trace failed with the
    bare ``FileNotFoundError`` and a traceback, not saying where the tracer looked."""
    try:
        yield
    except OSError as exc:
        if exc.filename is None:
            raise
        why = exc.strerror or type(exc).__name__
        raise SpecError(
            "MODEL_REF",
            f"{model_ref} cannot open {exc.filename!r} ({why}, at {user_frame(exc)}): the "
            f"tracer runs the factory, make_batch and loss_fn in {os.getcwd()!r}, the "
            "directory danlu runs in; run it where that path is (or give an absolute one), "
            "or make make_batch return random tensors of the batch's shapes (the trace "
            "reads no values)",
        ) from None
