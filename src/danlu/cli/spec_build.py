"""Building the body ``danlu submit`` sends: the spec file read, the flags' overrides and
``--set key=value`` applied, ``--after`` added to ``depends_on``, validated locally
(:func:`build_spec`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from danlu.cli.options import load_spec_file
from danlu.cli.spec_flags import by_flag
from danlu.core.errors import SpecError
from danlu.core.spec import TEXT_FIELDS, parse_spec
from danlu.core.spec_text import given_words, load_yaml

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
    JOB[:CONDITION]`` to ``depends_on``, validate it locally, and
    return the JSON body to submit (with the spec's ``array`` range, if it has one, as the
    file gives it, for :func:`~danlu.core.job_array.parse_array` to read or refuse: the
    caller submits it as a job array)."""
    data = load_spec_file(path, JOB_SPEC_FIX)
    if not isinstance(data, dict):
        raise SpecError("", f"a job spec must be a mapping of fields, got {given_words(data)}")
    apply_flags(data, overrides, sets, env)
    after_from = 0  # the index in depends_on of the first entry --after adds
    if after:
        listed = data.get("depends_on") or []
        data["depends_on"] = list(listed) if isinstance(listed, list) else [listed]
        after_from = len(data["depends_on"])
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
        raise by_flag(exc, overrides, sets, after, after_from) from None
    if array is not None:  # as written: parse_array says what to write for a list, a bool
        body["array"] = array
    return body


def apply_flags(
    data: dict[str, Any],
    overrides: dict[str, Any],
    sets: Sequence[str],
    env: Mapping[str, str] | None = None,
) -> None:
    """Set in ``data`` the flags' ``overrides`` (dotted fields, those not None), then the
    variables of ``env`` (``--env``) in its ``env`` by name, added or replacing those of the
    same name (a name may hold a dot), then each ``--set key=value`` of ``sets``
    (:func:`set_value`), which wins: a spec read from its file (``danlu submit``), or the
    changes ``danlu rerun`` sends."""
    for key, value in overrides.items():
        if value is not None:
            set_path(data, key, value)
    if env:
        if data.get("env") is None:
            data["env"] = {}
        if isinstance(data["env"], dict):  # else the validation refuses the file's env
            data["env"].update(env)
    for item in sets:
        key, sep, raw = item.partition("=")
        if not sep:
            raise SpecError(key, f"--set {item!r}: write key=value, e.g. --set resources.gpus=2")
        key = key.strip()
        set_path(data, key, set_value(key, raw))


def set_value(key: str, raw: str) -> Any:
    """The value of ``--set key=raw``: YAML read as a spec file is
    (:func:`~danlu.core.spec_text.load_yaml`: ``2``, ``[A100, H100]``, ``null``; ``010`` is 10 and
    ``1:00:00:00`` text, as in the file), but for an environment variable always the text as
    written (``env.MODE=null``), and for a text field (:data:`~danlu.core.spec.TEXT_FIELDS`)
    the text, not a number YAML reads in it (``name=2024``); ``null`` still unsets a text
    field that may be unset. A mapping with a key written twice is refused, naming it."""
    if key.startswith("env."):
        return raw  # environment values are strings, never YAML numbers or null
    try:
        value = load_yaml(raw) if raw else ""
    except SpecError as exc:  # a key written twice: its path within the field set
        raise SpecError(f"{key}.{exc.field}" if exc.field else key, exc.message) from None
    except (yaml.YAMLError, RecursionError, ValueError):  # ValueError: 5,000 digits
        return raw
    nullable = TEXT_FIELDS.get(key)
    if nullable is None or isinstance(value, str) or (value is None and nullable):
        return value
    return raw


def spec_body(data: dict[str, Any]) -> dict[str, Any]:
    """``data`` validated as a job spec (errors name the field), as the JSON body to submit:
    the fields it sets, defaults left out."""
    spec = parse_spec(data)
    return spec.model_dump(mode="json", exclude_defaults=True) | {"name": spec.name}
