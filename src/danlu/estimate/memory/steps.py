"""The training step that is traced and measured (imports torch: tracer subprocess only).

The same code drives the fake trace and the real ground-truth run, so the two see the same
program.
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
import sys
import traceback
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import torch

from danlu.core.errors import SpecError
from danlu.core.spec_training import OPTIMIZER_PRESETS
from danlu.estimate.memory.trace_result import module_path_problem, precision_name

Marker = Callable[[str], None]

_OPTIMIZERS = OPTIMIZER_PRESETS


def load_factory(model_ref: str, sys_path: tuple[str, ...] = ()) -> Callable[[], Any]:
    """Import ``package.module:factory`` (after putting ``sys_path`` first on ``sys.path``)."""
    for p in reversed(sys_path):
        if p not in sys.path:
            sys.path.insert(0, p)
    module_name, sep, attr = model_ref.partition(":")
    if not sep or not module_name or not attr:
        raise SpecError("MODEL_REF", f"{model_ref!r} is not of the form package.module:factory")
    problem = module_path_problem(module_name)
    if problem:  # importlib would raise TypeError (relative) or ValueError (empty name)
        raise SpecError("MODEL_REF", problem)
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        other = exc.name or ""
        if other and not (module_name == other or module_name.startswith(other + ".")):
            # the module was found; a module it imports was not, or lacks a name the
            # module imports from it: moving to the module's directory does not help
            problem = (
                f"it imports {other!r}, which is not installed; install it"
                if isinstance(exc, ModuleNotFoundError)
                else f"{exc} ({_raised_at(exc)}); fix the import, or install the version "
                f"of {other!r} that the module needs"
            )
            raise SpecError(
                "MODEL_REF",
                f"cannot import {module_name!r}: {problem} where danlu runs (the tracer "
                f"imports your model with {sys.executable})",
            ) from None
        raise SpecError(
            "MODEL_REF",
            f"cannot import {module_name!r} ({exc}); run from the "
            "directory that holds it or add it to PYTHONPATH",
        ) from exc
    except SyntaxError as exc:  # (IndentationError and TabError too)
        raise SpecError(
            "MODEL_REF",
            f"cannot import {module_name!r}: {type(exc).__name__} in {exc.filename}, line "
            f"{exc.lineno}: {exc.msg}; fix the module (python -c 'import {module_name}' "
            "shows it)",
        ) from None
    except Exception as exc:
        raise SpecError(
            "MODEL_REF",
            f"importing {module_name!r} failed: {type(exc).__name__}: {exc} "
            f"({_raised_at(exc)}); fix the module, or what it needs at import "
            f"(python -c 'import {module_name}' shows the whole traceback)",
        ) from None
    obj: Any = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise SpecError("MODEL_REF", f"module {module_name!r} has no attribute {attr!r}")
        obj = getattr(obj, part)
    if not callable(obj):
        raise SpecError("MODEL_REF", f"{model_ref!r} is not callable")
    return obj  # type: ignore[no-any-return]


def _raised_at(exc: BaseException) -> str:
    """Where ``exc`` was raised, as ``FILE, line N`` (the innermost frame that is not the
    import machinery's)."""
    frames = [
        f for f in traceback.extract_tb(exc.__traceback__) if not f.filename.startswith("<frozen")
    ]
    if not frames:
        return "where not known"
    return f"{frames[-1].filename}, line {frames[-1].lineno}"


def _check_arguments(
    fn: Callable[..., Any], args: tuple[Any, ...], call: str, takes: str, model_ref: str
) -> None:
    """A :class:`SpecError` on ``MODEL_REF`` when ``fn`` cannot be called with ``args``, as
    the step calls it (``call``, e.g. ``make_batch(b)``; ``takes``: what it must take, in
    words); a function with no signature to check (a builtin) passes: the call itself tells."""
    try:
        inspect.signature(fn).bind(*args)
    except TypeError as exc:
        raise SpecError(
            "MODEL_REF",
            f"{model_ref}: the trace calls {call}, which its function refuses ({exc}): make "
            f"it take {takes}",
        ) from None
    except ValueError:
        pass


def build(factory: Callable[[], Any], model_ref: str) -> tuple[torch.nn.Module, Any, Any]:
    """Call the factory and check it returned ``(model, make_batch, loss_fn)`` (the two
    functions callable as ``make_batch(b)`` and ``loss_fn(model, batch)``) with at
    least one trainable parameter (else the optimizer, built next, fails with an empty
    parameter list); a factory that cannot be called without arguments, or a model with no
    trainable parameter, is a :class:`SpecError` naming ``model_ref``."""
    try:
        inspect.signature(factory).bind()
    except TypeError as exc:
        raise SpecError(
            "MODEL_REF", f"{model_ref} must be callable without arguments, but {exc}"
        ) from None
    except ValueError:
        pass  # no signature to check (a builtin): the call itself tells
    out = factory()
    if not (
        isinstance(out, tuple)
        and len(out) == 3
        and isinstance(out[0], torch.nn.Module)
        and callable(out[1])
        and callable(out[2])
    ):
        raise SpecError(
            "MODEL_REF",
            f"{model_ref} must return (model, make_batch, loss_fn) with an nn.Module first "
            f"and two functions; it returned {_returned(out)}{_several_models_hint(out)}",
        )
    # the step calls them so: a mismatch failed inside the trace with a bare TypeError
    _check_arguments(out[1], (1,), "make_batch(b)", "one argument, the batch size", model_ref)
    _check_arguments(
        out[2], (out[0], None), "loss_fn(model, batch)", "the model and the batch", model_ref
    )
    params = list(out[0].parameters())
    if not any(p.requires_grad for p in params):  # checked before the optimizer is built
        if params:
            what = "all its parameters are frozen (requires_grad=False)"
        elif any(True for _ in out[0].buffers()):
            what = "it has buffers only"
        else:
            what = "it has no parameters"
        raise SpecError(
            "MODEL_REF",
            f"{model_ref} returns a model with no trainable parameters ({what}): a training "
            "step has nothing to update; return the model whose parameters the job trains",
        )
    return out


def _returned(out: Any) -> str:
    """What a factory returned, in words (a tuple's or list's items by their types): the
    refusal said what it wanted but not what it got (a list of the three, one of them not
    callable)."""
    if isinstance(out, tuple | list) and len(out) <= 8:
        items = ", ".join(type(item).__name__ for item in out)
        return f"a {type(out).__name__} of {len(out)} ({items})"
    return f"a {type(out).__name__}"


def _several_models_hint(out: Any) -> str:
    """How to return several models (a GAN's generator and discriminator) where the factory
    returned them in a tuple, list or dict as its first item (``""`` otherwise): the refusal
    said what it got but not how to give the step more than one model."""
    first = out[0] if isinstance(out, tuple | list) and out else None
    models = list(first.values()) if isinstance(first, Mapping) else first
    if not (
        isinstance(models, tuple | list)
        and models
        and all(isinstance(m, torch.nn.Module) for m in models)
    ):
        return ""
    return (
        "; hold several models (a GAN's generator and discriminator) in one module, e.g. "
        "nn.ModuleDict({'g': g, 'd': d}), which loss_fn gets as its model (model['g']): "
        "the one --optimizer is built over all their trainable parameters"
    )


def make_optimizer(
    name: str, model: torch.nn.Module, foreach: bool | None
) -> torch.optim.Optimizer:
    """Build the optimizer ``name`` (``adamw``, ``sgd-momentum``... or any torch.optim class)."""
    key = name.lower()
    if key in _OPTIMIZERS:
        cls_name, kwargs = _OPTIMIZERS[key]
    else:
        matches = [n for n in dir(torch.optim) if n.lower() == key and _steps_alone(n)]
        if not matches:
            raise SpecError(
                "--optimizer",
                f"unknown optimizer {name!r}; use one of "
                f"{', '.join(sorted(_OPTIMIZERS))} or the name of a torch.optim optimizer "
                "class whose step() needs no closure (LBFGS does)",
            )
        cls_name, kwargs = matches[0], {}
    if cls_name in UNTRACEABLE_OPTIMIZERS:
        raise SpecError("--optimizer", UNTRACEABLE_OPTIMIZERS[cls_name])
    cls = getattr(torch.optim, cls_name)
    kwargs = dict(kwargs)
    if foreach is not None and "foreach" in inspect.signature(cls).parameters:
        kwargs["foreach"] = foreach
    try:
        return cls(model.parameters(), **kwargs)  # type: ignore[no-any-return]
    except (TypeError, ValueError) as exc:
        raise SpecError(
            "--optimizer", f"torch.optim.{cls_name} cannot be built with its defaults: {exc}"
        ) from None


UNTRACEABLE_OPTIMIZERS: dict[str, str] = {
    "SparseAdam": (
        "torch.optim.SparseAdam updates sparse gradients only (an nn.Embedding with "
        "sparse=True), which the tracer cannot size: their size depends on the values; give "
        "--optimizer adam, whose state is the same two parameter-sized moments, and trace "
        "the model with sparse=False (an upper bound of the sparse gradients)"
    ),
}
"""``torch.optim`` optimizers the tracer cannot step, by class name, with the refusal that
names the one to estimate with instead: SparseAdam's step failed the trace with torch's
"SparseAdam does not support dense gradients" and a traceback."""


def _steps_alone(attr: str) -> bool:
    """Whether ``torch.optim.<attr>`` is an optimizer class (not the base class) whose
    ``step()`` runs without a closure, as one traced training step calls it."""
    cls = getattr(torch.optim, attr, None)
    if not (
        isinstance(cls, type)
        and issubclass(cls, torch.optim.Optimizer)
        and cls is not torch.optim.Optimizer
    ):
        return False
    closure = inspect.signature(cls.step).parameters.get("closure")
    return closure is None or closure.default is not inspect.Parameter.empty


DDP_FIRST_BUCKET_BYTES = 1024 * 1024
"""DDP's first gradient bucket (``torch.distributed._DEFAULT_FIRST_BUCKET_BYTES``)."""
DDP_BUCKET_BYTES = 25 * 1024 * 1024
"""DDP's other buckets (``bucket_cap_mb=25``, its default)."""


def ddp_bucket_sizes(model: torch.nn.Module) -> list[int]:
    """The bytes of each gradient bucket ``DistributedDataParallel(model)`` holds with its
    defaults (``gradient_as_bucket_view=False``: the buckets are buffers of their own) once it
    has rebuilt them after its first iteration (before that: one bucket per dtype): the
    parameters that need gradients, last first (about the order their gradients become
    ready), filled per dtype into buckets closed once they reach 1 MiB (the first) or 25 MiB
    (the rest). Their sum is the gradients' bytes."""
    open_: dict[torch.dtype, int] = {}
    closed: dict[torch.dtype, int] = {}
    sizes: list[int] = []
    for p in reversed([p for p in model.parameters() if p.requires_grad]):
        key = p.dtype
        open_[key] = open_.get(key, 0) + p.numel() * p.element_size()
        limit = DDP_FIRST_BUCKET_BYTES if closed.get(key, 0) == 0 else DDP_BUCKET_BYTES
        if open_[key] >= limit:
            sizes.append(open_.pop(key))
            closed[key] = closed.get(key, 0) + 1
    sizes.extend(n for n in open_.values() if n > 0)
    return sizes


def enable_checkpointing(model: torch.nn.Module, model_ref: str) -> None:
    """Turn on activation checkpointing: ``model.checkpointing = True`` or HF-style."""
    if hasattr(model, "gradient_checkpointing_enable"):
        model.gradient_checkpointing_enable()  # type: ignore[operator]
    elif hasattr(model, "checkpointing"):
        model.checkpointing = True  # type: ignore[assignment]
    else:
        raise SpecError(
            "--checkpointing",
            f"{model_ref} has neither a `checkpointing` attribute "
            "nor gradient_checkpointing_enable(); turn activation checkpointing off or add one",
        )


_AUTOCAST_DTYPES: dict[str, torch.dtype | None] = {
    "fp32": None,
    "fp16": torch.float16,
    "bf16": torch.bfloat16,
}
"""The dtype autocast computes in at each precision (``None``: no autocast)."""


def autocast_dtype(precision: str) -> torch.dtype | None:
    """The dtype autocast computes in at ``precision`` (None: fp32, no autocast), the name
    read as ``danlu.train`` reads it (:func:`precision_name`: ``"BF16"`` is bf16);
    :class:`SpecError` for another name (every name but two was float16)."""
    return _AUTOCAST_DTYPES[precision_name(precision)]


def autocast(precision: str, device: str = "cpu") -> contextlib.AbstractContextManager[Any]:
    """The autocast context for ``precision`` on ``device`` (fp32: none;
    :func:`autocast_dtype`)."""
    dtype = autocast_dtype(precision)
    if dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(device, dtype=dtype)


def train_step(
    model: torch.nn.Module,
    opt: torch.optim.Optimizer,
    batch: Any,
    loss_fn: Callable[[torch.nn.Module, Any], torch.Tensor],
    precision: str,
    accumulation: int,
    mark: Marker,
    device: str = "cpu",
) -> None:
    """One optimizer step: ``accumulation`` forward/backward passes, step, zero_grad."""
    for _ in range(accumulation):
        mark("forward")
        with autocast(precision, device):
            loss = checked_loss(loss_fn(model, batch))
        if accumulation > 1:
            loss = loss / accumulation
        mark("backward")
        loss.backward()  # type: ignore[no-untyped-call]
        del loss
    mark("optimizer")
    opt.step()
    mark("zero_grad")
    opt.zero_grad(set_to_none=True)
    mark("end")


def checked_loss(loss: Any) -> torch.Tensor:
    """``loss`` when it is what ``loss.backward()`` needs: a one-element tensor that requires
    grad. Anything else (a tuple or dict with the loss in it, a Python number, a per-sample
    loss, a loss computed without the model's parameters) is a :class:`SpecError` on
    ``MODEL_REF`` saying what ``loss_fn`` returned, where backward failed with an error that
    named neither the function nor the fix (``'tuple' object has no attribute 'backward'``)."""
    fix = "return the micro-batch's mean loss as a scalar tensor computed from the model"
    if not isinstance(loss, torch.Tensor):
        raise SpecError(
            "MODEL_REF", f"loss_fn returned a {type(loss).__name__}: {fix}{_loss_within(loss)}"
        )
    if loss.numel() != 1:
        raise SpecError(
            "MODEL_REF",
            f"loss_fn returned a tensor of shape {tuple(loss.shape)}, not one value "
            f"(a per-sample loss?): {fix} (e.g. .mean())",
        )
    if not loss.requires_grad:
        raise SpecError(
            "MODEL_REF",
            "loss_fn returned a tensor that does not require grad (computed without the "
            f"model's trainable parameters, or under torch.no_grad()): {fix}",
        )
    return loss


def _loss_within(returned: Any) -> str:
    """Where the loss is in what ``loss_fn`` returned, as a hint to return it (``""`` when
    not seen): a model output's ``.loss`` (a dataclass, a Hugging Face ``ModelOutput``), a
    mapping's ``"loss"``, a tuple's or list's first one-element tensor. The refusal said "return the
    mean loss as a scalar tensor" to a user whose function returned ``model(**batch)``."""
    if isinstance(returned, Mapping):
        if isinstance(returned.get("loss"), torch.Tensor):
            return "; its ['loss'] holds one: return that (e.g. model(**batch)['loss'])"
        return ""
    if isinstance(returned, tuple | list):
        for i, item in enumerate(returned):
            if isinstance(item, torch.Tensor) and item.numel() == 1:
                return f"; its item {i} is one value: return it alone if it is the loss (out[{i}])"
        return ""
    if isinstance(getattr(returned, "loss", None), torch.Tensor):
        return "; its .loss holds one: return that (e.g. model(**batch).loss)"
    return ""


def _leaves(objs: Any) -> Iterator[Any]:
    """The leaves of a (nested) structure: torch's pytrees (tuples, named tuples, lists,
    dicts) and, inside them or at the top, any other mapping, tuple or list, walked as
    ``danlu.train`` walks a batch to move its tensors to the GPU. A mapping that is no
    ``dict`` (a ``UserDict``, a tokenizer's ``BatchEncoding``) is a leaf to torch's pytrees:
    it is walked all the same."""
    from torch.utils._pytree import tree_flatten

    pending: list[Any] = [objs]
    seen: set[int] = set()  # the containers walked: a mapping that holds itself is walked once
    while pending:
        for leaf in tree_flatten(pending.pop())[0]:
            if isinstance(leaf, Mapping | list | tuple):
                if id(leaf) not in seen:
                    seen.add(id(leaf))
                    pending.append(list(leaf.values()) if isinstance(leaf, Mapping) else list(leaf))
            else:
                yield leaf


def tensors(objs: Any) -> Iterator[torch.Tensor]:
    """The tensors in a (nested) structure (:func:`_leaves`). A mapping that is no ``dict``
    was a leaf: its tensors went uncounted as the batch's, and their bytes showed as
    temporaries where the same tensors in a dict showed as activations."""
    for leaf in _leaves(objs):
        if isinstance(leaf, torch.Tensor):
            yield leaf


def checked_batch(batch: Any, model_ref: str) -> Any:
    """``batch`` unless it is, or holds in its containers, an iterator (a generator from a
    ``make_batch`` that yields, ``iter(...)``, ``map(...)``): a :class:`SpecError` on
    ``MODEL_REF`` saying what to return instead. A step passes the one batch to ``loss_fn``
    at every forward pass (the warm-up step, the measured one, each accumulation pass), so
    a one-shot iterator was used up by the first: the trace failed with a bare
    ``StopIteration``, or with the model refusing a ``generator`` as its input. Nor can
    ``danlu.train`` move an iterator's tensors to the GPU: a batch is tensors in tuples,
    lists and mappings (:func:`tensors`)."""
    for leaf in _leaves(batch):
        if isinstance(leaf, Iterator):
            held = "" if leaf is batch else "a batch holding "
            raise SpecError(
                "MODEL_REF",
                f"{model_ref}: make_batch(b) returned {held}a {type(leaf).__name__}, an "
                "iterator that one pass uses up, while the trace gives the same batch to "
                "loss_fn at every pass; return the batch itself: a tensor, or tensors in "
                "tuples, lists and dicts (`return torch.randn(b, 8)`, not `yield ...`)",
            )
    return batch


def storages(objs: Any) -> Iterator[torch.UntypedStorage]:
    """Storages of the tensors in a (nested) structure (:func:`tensors`)."""
    for t in tensors(objs):
        yield t.untyped_storage()
