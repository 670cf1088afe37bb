"""``training.family`` in any case: ``Transformer`` and ``Auto`` were refused as unknown
families while ``precision``, ``optimizer`` and ``gpu_memory: Auto`` take any case. Stored as
the families are written (lower case), so the interference model and the ``auto`` inference
find it; a misspelt family says the one meant."""

from __future__ import annotations

import pytest

from danlu.core.errors import SpecError
from danlu.core.spec import AUTO_FAMILY, parse_spec

JOB = {"name": "a", "command": ["python", "train.py"]}


@pytest.mark.parametrize(
    ("given", "stored"),
    [
        ("Transformer", "transformer"),
        (" CNN-Small ", "cnn-small"),
        ("Auto", AUTO_FAMILY),
        ("lstm", "lstm"),
    ],
)
def test_a_family_in_any_case_is_stored_lower_case(given: str, stored: str) -> None:
    training = {"family": given, "model": "pkg.models:make"}  # auto infers from the model
    assert parse_spec({**JOB, "training": training}).training.family == stored


@pytest.mark.parametrize(
    ("given", "meant"), [("cnn_small", "cnn-small"), ("transfomer", "transformer")]
)
def test_a_misspelt_family_names_the_one_meant(given: str, meant: str) -> None:
    with pytest.raises(SpecError) as raised:
        parse_spec({**JOB, "training": {"family": given}})
    assert raised.value.field == "training.family"
    assert f"(did you mean {meant}?)" in raised.value.message


def test_an_unknown_family_still_lists_the_families() -> None:
    with pytest.raises(SpecError, match="unknown model family 'xyz'; use one of cnn-small"):
        parse_spec({**JOB, "training": {"family": "xyz"}})
