"""A job spec's training setup for the memory estimate: ``training.precision``,
``training.optimizer`` and ``training.activation_checkpointing``, as ``danlu estimate``'s
``--precision``, ``--optimizer`` and ``--checkpointing`` take them."""

from __future__ import annotations

from typing import Any

import pytest

from danlu.core.errors import SpecError
from danlu.core.spec import parse_spec


def _training(stored: bool = False, **training: Any) -> Any:
    body = {"name": "j", "command": ["true"], "training": training}
    return parse_spec(body, stored=stored).training


def test_the_defaults_are_what_the_estimate_assumed() -> None:
    hints = _training()
    assert (hints.precision, hints.optimizer, hints.activation_checkpointing) == (
        "fp32",
        "adamw",
        False,
    )


@pytest.mark.parametrize(
    ("given", "stored"),
    [
        ("bf16", "bf16"),
        (" BF16 ", "bf16"),
        ("fp16", "fp16"),
        ("16", "fp16"),
        (16, "fp16"),
        (32, "fp32"),
        ("FP32", "fp32"),
    ],
)
def test_a_precision_is_stored_by_the_estimator_s_name(given: Any, stored: str) -> None:
    assert _training(precision=given).precision == stored


@pytest.mark.parametrize(
    ("given", "stored"),
    [
        ("AdamW", "adamw"),
        ("sgd-momentum", "sgd-momentum"),
        (" Adadelta ", "adadelta"),
        ("SparseAdam", "sparseadam"),
    ],
)
def test_an_optimizer_is_a_preset_or_a_torch_optim_class_name(given: str, stored: str) -> None:
    assert _training(optimizer=given).optimizer == stored


@pytest.mark.parametrize("value", [True, "yes", " True ", "on"])
def test_checkpointing_takes_true_as_yaml_and_pydantic_write_it(value: Any) -> None:
    assert _training(activation_checkpointing=value).activation_checkpointing is True


@pytest.mark.parametrize(
    ("field", "value", "says"),
    [
        ("precision", "fp8", "'fp8' is not one of fp32, fp16 or bf16"),
        ("precision", 8, "a number (8) is not one of fp32, fp16 or bf16"),
        ("precision", None, "null is not one of fp32, fp16 or bf16"),
        ("precision", True, "a boolean (true) is not one of fp32, fp16 or bf16"),
        ("optimizer", "ad am", "'ad am': use one of adagrad, adam"),
        ("optimizer", "", "'': use one of adagrad"),
        ("optimizer", "lbfgs", "step() needs a closure"),
        ("optimizer", "Optimizer", "the base class of the optimizers"),
        ("optimizer", 3, "3 was read as a number, not text: quote it"),
        ("activation_checkpointing", "maybe", "'maybe' is not true or false"),
        ("activation_checkpointing", 2, "2 is not true or false: write true or false"),
        ("activation_checkpointing", None, "is null"),
    ],
)
def test_a_bad_setup_is_refused_naming_the_field_and_the_values(
    field: str, value: Any, says: str
) -> None:
    with pytest.raises(SpecError) as raised:
        _training(**{field: value})
    assert raised.value.field == f"training.{field}"
    assert says in raised.value.message


def test_every_preset_is_named_in_the_optimizer_error() -> None:
    from danlu.core.spec_training import OPTIMIZER_PRESETS

    with pytest.raises(SpecError) as raised:
        _training(optimizer="no such")
    for name in OPTIMIZER_PRESETS:
        assert name in raised.value.message


def test_a_spec_stored_without_the_setup_loads_as_it_was() -> None:
    """A spec accepted before these fields existed: the same fields and values, the setup at
    its defaults; a client leaves the defaults out of what it sends (``exclude_defaults``),
    so an older server takes a spec that names none of them."""
    stored = {
        "name": "j",
        "command": ["true"],
        "resources": {"gpus": {"min": 1, "max": 4}},
        "training": {"global_batch_size": 64, "model": "danlu.estimate.zoo:gpt2_tiny"},
    }
    spec = parse_spec(stored, stored=True)
    dumped = spec.model_dump(mode="json")
    training = dumped["training"]
    assert training["global_batch_size"] == 64
    assert training["model"] == "danlu.estimate.zoo:gpt2_tiny"
    assert (training["precision"], training["optimizer"]) == ("fp32", "adamw")
    assert training["activation_checkpointing"] is False
    assert parse_spec(dumped, stored=True) == spec  # stored again, read again: the same
    sent = spec.model_dump(mode="json", exclude_defaults=True)
    assert sent["training"] == stored["training"]
