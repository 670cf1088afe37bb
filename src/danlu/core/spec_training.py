"""The names of a training setup that the memory estimate depends on: the precision and the
optimizer, as a job spec's ``training.precision`` and ``training.optimizer``, ``danlu
estimate``'s ``--precision`` and ``--optimizer`` and ``danlu.train`` take them.

Plain data and their checks, without torch: a job spec is read where torch is not installed
(the client, the control plane), and the estimator's tracer, which builds the optimizer with
torch, reads the same table (:func:`danlu.estimate.memory.steps.make_optimizer`).
"""

from __future__ import annotations

import re
from typing import Any, Literal

from danlu.core.errors import SpecError
from danlu.core.spec_hints import choice_hint
from danlu.core.spec_text import given_words

AUTO_FAMILY = "auto"
"""``training.family: auto``: the family is inferred from ``training.model`` at submission."""

Precision = Literal["fp32", "fp16", "bf16"]
PRECISIONS: tuple[str, ...] = ("fp32", "fp16", "bf16")
PRECISION_SPELLINGS: dict[str, Precision] = {
    "fp32": "fp32",
    "32": "fp32",
    "fp16": "fp16",
    "16": "fp16",
    "bf16": "bf16",
}
"""The precision names ``danlu.train`` accepts (``danlu.train.amp``; in any case, blanks
around them ignored) -> the estimator's name for each."""


def precision_name(value: Any, field: str = "--precision") -> Precision:
    """The estimator's name (``fp32``, ``fp16`` or ``bf16``) of a precision as ``danlu.train``
    spells it: any case, blanks around it ignored, ``32`` and ``16`` for fp32 and fp16.
    :class:`SpecError` on ``field`` for anything else."""
    key = value.strip().lower() if isinstance(value, str) else None
    if key is None or key not in PRECISION_SPELLINGS:
        meant = None if key is None else choice_hint(key, list(PRECISIONS))
        hint = f" (did you mean {meant}?)" if meant is not None else ""
        raise SpecError(
            field,
            f"{given_words(value)} is not one of fp32, fp16 or bf16{hint}; any case, and 32 "
            "and 16, are taken too",
        )
    return PRECISION_SPELLINGS[key]


OPTIMIZER_PRESETS: dict[str, tuple[str, dict[str, Any]]] = {
    "sgd": ("SGD", {"lr": 1e-2}),
    "sgd-momentum": ("SGD", {"lr": 1e-2, "momentum": 0.9}),
    "adam": ("Adam", {"lr": 1e-3}),
    "adamw": ("AdamW", {"lr": 1e-3}),
    "adagrad": ("Adagrad", {"lr": 1e-2}),
    "rmsprop": ("RMSprop", {"lr": 1e-3}),
    "adamax": ("Adamax", {"lr": 1e-3}),
    "nadam": ("NAdam", {"lr": 1e-3}),
    "radam": ("RAdam", {"lr": 1e-3}),
}
"""The optimizers named by a short name -> the ``torch.optim`` class and the arguments the
estimator builds it with. Any other ``torch.optim`` optimizer class whose ``step()`` needs no
closure is named by its class name (``Adadelta``), in any case."""

DEFAULT_OPTIMIZER = "adamw"
"""The optimizer the memory estimate assumes when a job spec names none."""

_OPTIMIZER_CLASS = re.compile(r"^[a-z][a-z0-9_]{0,63}\Z")
"""What a ``torch.optim`` class name looks like, lower-cased (``adadelta``, ``sparseadam``)."""

_NO_OPTIMIZER = {
    "optimizer": "the base class of the optimizers",
    "lbfgs": "its step() needs a closure, which one traced training step does not give",
}
"""``torch.optim`` class names that are no optimizer one training step can run, and why."""


def optimizer_name(value: Any, field: str = "--optimizer") -> str:
    """The name of an optimizer as the estimator looks it up: lower-cased, blanks around it
    ignored; one of :data:`OPTIMIZER_PRESETS` or what reads as a ``torch.optim`` class name
    (whether torch has that class is known only where torch is: the trace says so).
    :class:`SpecError` on ``field`` for anything else."""
    key = value.strip().lower() if isinstance(value, str) else None
    if key is not None and key in OPTIMIZER_PRESETS:
        return key
    why = _NO_OPTIMIZER.get(key or "")
    if key is None or why is not None or not _OPTIMIZER_CLASS.match(key):
        reason = f" ({why})" if why else ""
        raise SpecError(
            field,
            f"{given_words(value)}{reason}: use one of {', '.join(sorted(OPTIMIZER_PRESETS))} or "
            "the class name of a torch.optim optimizer (Adadelta); default "
            f"{DEFAULT_OPTIMIZER}",
        )
    return key
