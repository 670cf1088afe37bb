"""The spec's error messages live in :mod:`danlu.core.spec_errors`; :mod:`danlu.core.spec`
re-exports them, so every import of them from there keeps working and names the same
objects."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

import danlu.core.spec as spec
import danlu.core.spec_errors as spec_errors
from danlu.core.errors import SpecError
from danlu.core.spec import JobSpec


@pytest.mark.parametrize("name", ["spec_error", "name_error", "valid_name", "NAME_RULE"])
def test_the_spec_module_re_exports_its_error_helpers(name: str) -> None:
    assert getattr(spec, name) is getattr(spec_errors, name)


def test_spec_error_names_the_section_a_misplaced_field_goes_in() -> None:
    with pytest.raises(ValidationError) as caught:
        JobSpec.model_validate({"name": "a", "gpus": 2})
    error = spec_errors.spec_error(caught.value)
    assert isinstance(error, SpecError)
    assert error.field == "gpus"
    assert "write it as resources.gpus" in str(error)


def test_a_sweep_spec_error_does_not_send_a_field_to_a_job_spec_section() -> None:
    """A sweep's job spec fields go under its ``trial``: the error names
    ``trial.resources.gpus``, never the job spec's own ``resources.gpus``."""
    with pytest.raises(ValidationError) as caught:
        JobSpec.model_validate({"name": "a", "gpus": 2})
    error = spec_errors.spec_error(caught.value, "sweep spec")
    assert "write it as trial.resources.gpus" in str(error)
    assert " resources.gpus" not in str(error)


def test_name_error_says_what_breaks_the_rule() -> None:
    assert not spec_errors.valid_name("训练")
    assert spec_errors.name_error("训练").endswith("'训' is not an ASCII letter or digit")
    assert spec_errors.name_error("a" * 64).endswith("it has 64 characters")
    assert spec_errors.name_error("a/b") == spec_errors.NAME_RULE
    assert spec_errors.valid_name("run-1.a_b")
