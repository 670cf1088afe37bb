"""Text that YAML's ``!!bool`` or ``!!timestamp`` tag cannot read (``!!bool maybe``,
``!!timestamp soon``) is bad YAML: a :class:`SpecError` from a spec, a ``YAMLError`` from
``load_yaml`` (``danlu submit --set``). PyYAML raised a ``KeyError`` and an
``AttributeError``, which no caller took for bad YAML: a traceback."""

from __future__ import annotations

import datetime
from pathlib import Path

import pytest
import yaml

from danlu.core.errors import SpecError
from danlu.core.spec import load_spec, loads_spec
from danlu.core.spec_text import load_yaml

BASE = "name: a\ncommand: [x]\n"


@pytest.mark.parametrize(
    ("line", "says"),
    [
        ("preemptible: !!bool maybe", "'maybe' is not a boolean"),
        ("shell: !!bool ''", "'' is not a boolean"),
        ("workdir: !!timestamp soon", "'soon' is not a date or time"),
        ("workdir: !!timestamp ''", "'' is not a date or time"),
    ],
)
def test_a_tag_that_cannot_read_its_text_is_bad_yaml(line: str, says: str, tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="not valid YAML") as caught:
        loads_spec(BASE + line)
    assert says in caught.value.message
    path = tmp_path / "job.yaml"
    path.write_text(BASE + line)
    with pytest.raises(SpecError, match=says):
        load_spec(path)


def test_load_yaml_raises_a_yaml_error_for_them() -> None:
    with pytest.raises(yaml.YAMLError, match="not a boolean"):
        load_yaml("!!bool maybe")
    with pytest.raises(yaml.YAMLError, match="not a date or time"):
        load_yaml("!!timestamp soon")


def test_booleans_and_dates_read_as_before() -> None:
    assert load_yaml("[!!bool Yes, !!bool off, !!bool TRUE, yes, on, false]") == [
        True,
        False,
        True,
        True,
        True,
        False,
    ]
    assert load_yaml("!!timestamp 2026-12-01") == datetime.date(2026, 12, 1)
    assert load_yaml("2026-12-01T02:00:00Z") == datetime.datetime(
        2026, 12, 1, 2, tzinfo=datetime.UTC
    )
    assert loads_spec(BASE + "preemptible: !!bool no").preemptible is False
    with pytest.raises(SpecError, match=r"month must be in 1\.\.12"):
        loads_spec(BASE + "workdir: !!timestamp 2026-13-01")
