"""Building the body ``danlu submit`` sends: the spec file read, the flags' overrides and
``--set key=value`` applied, ``--after`` added to ``depends_on``, validated locally
(:func:`build_spec`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from danlu.cli.options import load_spec_file
from danlu.cli.spec_flags import (
    FlagWrite,
    after_writes,
    flag_error,
    flag_writes,
    named_by_flag,
)
from danlu.core.errors import SpecError
from danlu.core.spec import parse_spec
from danlu.core.spec_text import given_words

JOB_SPEC_FIX = "give the job spec file (YAML or JSON)"
"""What to give instead of a SPEC refused (empty, or a named pipe)."""


def set_path(data: dict[str, Any], dotted: str, value: Any) -> None:
    """``data["a"]["b"] = value`` for ``dotted = "a.b"``, creating mappings on the way."""
    parts = dotted.split(".")
    if not all(parts):
        raise SpecError(dotted, "an override key must be a dotted field name, e.g. resources.gpus")
    node = data
    for part in parts[:-1]:
        child = node.get(part)
        if child is None:
            child = node[part] = {}
        if not isinstance(child, dict):
            raise SpecError(dotted, f"{part!r} is not a mapping, cannot set a field inside it")
        node = child
    node[parts[-1]] = value


def build_spec(
    path: Path,
    overrides: dict[str, Any],
    sets: list[str],
    after: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """Read ``path`` (YAML or JSON), apply flag overrides, ``--env`` (``env``) and ``--set
    key=value`` (values parsed as YAML; :func:`apply_flags`), add ``--after
    JOB[:CONDITION]`` to ``depends_on``, validate it locally (a refused field that a flag
    gave named by that flag: :func:`~danlu.cli.spec_flags.named_by_flag`), and
    return the JSON body to submit (with the spec's ``array`` range, if it has one, as the
    file gives it, for :func:`~danlu.core.job_array.parse_array` to read or refuse: the
    caller submits it as a job array)."""
    data = load_spec_file(path, JOB_SPEC_FIX)
    if not isinstance(data, dict):
        raise SpecError("", f"a job spec must be a mapping of fields, got {given_words(data)}")
    writes = apply_flags(data, overrides, sets, env)
    if after:
        listed = data.get("depends_on") or []
        data["depends_on"] = list(listed) if isinstance(listed, list) else [listed]
        writes += after_writes(after, len(data["depends_on"]))
        for item in after:
            job, colon, condition = item.partition(":")
            if colon and not condition.strip():
                # --after "$JOB:$WHEN" with WHEN unset waited for the job to succeed
                raise SpecError(
                    "--after",
                    f"{item!r} names no condition after ':'; write {job or 'ID'} (to succeed) "
                    "or ID:failed, ID:finished, ID:started",
                )
            data["depends_on"].append({"job": job, "condition": condition or "succeeded"})
    array = data.pop("array", None)
    try:
        body = spec_body(data)
    except SpecError as exc:  # a field a flag gave is named by that flag
        raise named_by_flag(exc, writes) from None
    if array is not None:  # as written: parse_array says what to write for a list, a bool
        body["array"] = array
    return body


def apply_flags(
    data: dict[str, Any],
    overrides: dict[str, Any],
    sets: Sequence[str],
    env: Mapping[str, str] | None = None,
) -> list[FlagWrite]:
    """Set in ``data`` what the flags give (:func:`~danlu.cli.spec_flags.flag_writes`): the
    ``overrides`` (dotted fields, those not None), then the variables of ``env``
    (``--env``) in its ``env`` by name, added or replacing those of the same name (a name
    may hold a dot), then each ``--set key=value`` of ``sets``, which wins: a spec read from
    its file (``danlu submit``), or the changes ``danlu rerun`` sends. Returns those
    writes, by which a refusal of a field they gave is named
    (:func:`~danlu.cli.spec_flags.named_by_flag`). A key that names no field one can set
    (``--set =1``, ``--set command.x=1`` over a list) is a
    :class:`~danlu.cli.spec_flags.FlagValueError` naming its flag."""
    writes = flag_writes(overrides, sets, env)
    for write in writes:
        if not write.variable:
            try:
                set_path(data, ".".join(write.path), write.value)
            except SpecError as exc:  # --set '=1', --set command.x=1: the flag's key
                raise flag_error(exc.field or "", write.flag, exc.message) from None
            continue
        if data.get("env") is None:
            data["env"] = {}
        if isinstance(data["env"], dict):  # else the validation refuses the file's env
            data["env"][write.path[-1]] = write.value
    return writes


def spec_body(data: dict[str, Any]) -> dict[str, Any]:
    """``data`` validated as a job spec (errors name the field), as the JSON body to submit:
    the fields it sets, defaults left out."""
    spec = parse_spec(data)
    return spec.model_dump(mode="json", exclude_defaults=True) | {"name": spec.name}
