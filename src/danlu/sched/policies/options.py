"""Type checks of a policy's options against its dataclass fields, shared by the registry
(options by name, as ``danlu sim run --option`` passes them) and policies that check
themselves when built (``DanluPolicy``)."""

from __future__ import annotations

import typing

from danlu.core.errors import ConfigError


def check_option_type(policy: str, key: str, value: object, hint: object) -> None:
    """Raise :class:`ConfigError` when ``value`` does not have the option's declared type
    ``hint`` (bool, int, float, str or a tuple of numbers; an int is a valid float, a bool is
    not a number; other hints are not checked)."""
    what: str | None = None
    if hint is bool:
        what = None if isinstance(value, bool) else "true or false"
    elif hint is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
        what = None if ok else "a whole number"
    elif hint is float:
        ok = isinstance(value, int | float) and not isinstance(value, bool)
        what = None if ok else "a number"
    elif hint is str:
        what = None if isinstance(value, str) else "a string"
    elif typing.get_origin(hint) is tuple:
        ok = isinstance(value, tuple | list) and all(
            isinstance(v, int | float) and not isinstance(v, bool) for v in value
        )
        what = None if ok else "a list of numbers"
    if what is not None:
        raise ConfigError(f"policy {policy!r} option {key!r} must be {what}, got {value!r}")
