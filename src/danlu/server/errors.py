"""Server-side errors (subclasses of :class:`~danlu.core.errors.DanluError`).

Until the lead moves them into ``danlu.core.errors`` they live here. Routes map them to HTTP:
``AuthError`` 401, ``PermissionDenied`` 403, ``NotFoundError`` 404, ``ConflictError`` 409,
``AdmissionError`` 422 (a spec that can never fit; names the field).
"""

from __future__ import annotations

from danlu.core.errors import DanluError, UnschedulableError


class AuthError(DanluError):
    """No token, or a token that matches no user."""


class _FieldError(DanluError):
    """An error that may name the request's field it is about (``field``, dotted; None: the
    request as a whole), which the error body carries beside ``message`` (docs/api.md); its
    text is ``field: message``, as a :class:`~danlu.core.errors.SpecError`'s."""

    def __init__(self, message: str, field: str | None = None) -> None:
        self.field = field
        self.message = message
        super().__init__(f"{field}: {message}" if field else message)


class PermissionDenied(_FieldError):
    """An authenticated user may not do this (someone else's job, an admin-only action);
    ``field``: the field that asked for it (``user`` naming another user), if any."""


class NotFoundError(DanluError, LookupError):
    """A job, project, user or node that does not exist. ``field`` names the lookup key."""

    def __init__(self, kind: str, key: str, field: str = "id", hint: str = "") -> None:
        self.kind = kind
        self.key = key
        self.field = field
        super().__init__(f"{kind} {key!r} not found" + (f" ({hint})" if hint else ""))

    def __str__(self) -> str:
        return str(self.args[0])


class ConflictError(_FieldError):
    """The request conflicts with the current state (cancel a finished job, a name taken,
    a row changed concurrently); ``field``: the field in conflict (``name`` taken), if any."""


class AdmissionError(UnschedulableError):
    """A spec that can never run here (cluster inventory, project or user quota); names the
    field."""

    def __init__(self, field: str, message: str) -> None:
        self.field = field
        self.message = message
        super().__init__(f"{field}: {message}")
