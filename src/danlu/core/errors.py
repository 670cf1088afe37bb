"""The one exception tree of danlu.

Every error danlu raises on purpose derives from :class:`DanluError`, so callers can
catch everything of ours with one ``except``, or one branch of the tree::

    DanluError
    ├── SpecError (ValueError)          a job spec or request field is invalid; names the field
    ├── DataError (ValueError)          a trace, workload or measurement file is unreadable
    ├── ConfigError (ValueError)        a setting is invalid (CLI flag, config file, env variable)
    ├── UnknownNameError (KeyError)     a registry lookup failed; lists the valid names
    ├── InvalidTransitionError          a job state change that the transition table forbids
    ├── PlacementError                  a placement over-allocates the cluster
    └── UnschedulableError              a request can never fit the cluster; says why

``assert`` is used only for internal invariants, never for input validation.

Every one pickles and comes back the same (type, message, attributes), whatever its
``__init__`` takes: a danlu error raised in a Ray task, a process pool's worker or any other
process reaches the caller as itself.
"""

from __future__ import annotations

from typing import Any


def rebuild_error(
    cls: type[DanluError], args: tuple[Any, ...], state: dict[str, Any]
) -> DanluError:
    """``cls`` as it was pickled: its ``args`` and attributes set back without calling its
    ``__init__`` (which takes other arguments than ``args``: ``SpecError(field, message)``
    holds only the joined text). Used by :meth:`DanluError.__reduce__`."""
    error = cls.__new__(cls, *args)
    error.args = args
    error.__dict__.update(state)
    return error


class DanluError(Exception):
    """Root of all errors raised by danlu."""

    def __reduce__(self) -> tuple[Any, ...]:
        # Exception's own __reduce__ calls cls(*self.args) when unpickled: an __init__ with
        # other arguments than the message (most of ours) failed with a TypeError there
        return (rebuild_error, (type(self), self.args, dict(self.__dict__)))


class SpecError(DanluError, ValueError):
    """An invalid job spec or request field.

    ``field`` is the dotted path of the offending field (``resources.gpus``) and the
    message says how to fix it.
    """

    def __init__(self, field: str, message: str) -> None:
        self.field = field
        self.message = message
        super().__init__(f"{field}: {message}" if field else message)


class DataError(DanluError, ValueError):
    """A data file (trace, workload, measurement) is missing or malformed."""


class ConfigError(DanluError, ValueError):
    """An invalid setting: a CLI flag, a configuration file entry or an environment variable."""


class UnknownNameError(DanluError, KeyError):
    """A name that is not in a registry. The message lists the valid names."""

    def __init__(self, kind: str, name: str, valid: list[str]) -> None:
        self.kind = kind
        self.name = name
        self.valid = sorted(valid)
        super().__init__(f"unknown {kind} {name!r}; valid names: {', '.join(self.valid)}")

    def __str__(self) -> str:  # KeyError would otherwise quote the message
        return str(self.args[0])


class InvalidTransitionError(DanluError):
    """A job state change that is not an edge of the transition table."""


class PlacementError(DanluError):
    """A placement that does not fit the cluster it is applied to."""


class UnschedulableError(DanluError):
    """A request that can never fit the cluster, with the reason."""
