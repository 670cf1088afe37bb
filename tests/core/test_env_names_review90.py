"""An ``env`` name YAML read as a number, boolean or date is refused naming ``env`` and
saying to quote it: pydantic said only "Input should be a valid string" at ``env.1.[key]``
(``true`` named so too, a field the user never wrote)."""

from __future__ import annotations

import pytest

from danlu.core.errors import SpecError
from danlu.core.spec import loads_spec


@pytest.mark.parametrize(
    ("written", "said"),
    [("1", "quote it, '1'"), ("1.5", "quote it, '1.5'"), ("true", "read as a boolean")],
)
def test_env_name_read_as_no_text(written: str, said: str) -> None:
    with pytest.raises(SpecError) as caught:
        loads_spec(f"name: a\ncommand: [x]\nenv: {{{written}: x}}")
    assert caught.value.field == "env"
    assert said in caught.value.message


def test_quoted_names_read() -> None:
    spec = loads_spec("name: a\ncommand: [x]\nenv: {'1': x, 'true': y, A: z}")
    assert spec.env == {"1": "x", "true": "y", "A": "z"}
