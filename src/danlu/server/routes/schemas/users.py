"""The models of users and their API tokens, and the functions that turn their store rows
into them."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, field_validator

from danlu.core.values import control_character
from danlu.server.db import ApiToken, User, UserEvent
from danlu.server.routes.schemas.base import _In, _no_boolean

UserName = Annotated[str, Field(min_length=1, max_length=64)]
"""A user's name in a request (the store's column holds 64 characters)."""


class UserOut(BaseModel):
    """A user; ``os_user``: the OS account its jobs run as with ``DANLU_RUN_AS=user`` (null:
    the one named like the user)."""

    name: str
    role: Literal["admin", "user"]
    os_user: str | None = None
    quota_gpus: float | None = None
    """The most GPUs the user's running jobs may hold at once, in all projects; null: no
    limit of the user's own."""
    disabled_at: float | None = None
    """When an admin disabled the user (their tokens refused, their queued jobs not
    started); null: enabled."""
    disabled_by: str | None = None
    """The admin who disabled the user (or last gave the reason); null while enabled, and
    for a user disabled before it was recorded."""
    disable_reason: str | None = None
    """Why the admin disabled the user; null while enabled, or when none was given."""


class UserIn(_In):
    """A new user (admin)."""

    name: str = Field(max_length=63)
    role: Literal["admin", "user"] = "user"
    os_user: str | None = Field(default=None, max_length=32)


class UserPatch(_In):
    """A change of a user (admin): ``role`` (``admin`` or ``user``; the last enabled admin
    cannot be made a user), ``os_user`` (null: the OS account named like the user),
    ``quota_gpus`` (null: none); fields left out stay as they are."""

    role: Literal["admin", "user"] | None = None
    """Left out: kept; null is refused (a 422 naming ``role``), as no role is none."""
    os_user: str | None = Field(default=None, max_length=32)
    quota_gpus: float | None = Field(default=None, ge=0, le=1e9, allow_inf_nan=False)

    _numbers = field_validator("quota_gpus", mode="before")(_no_boolean)

    @field_validator("role")
    @classmethod
    def _a_role(cls, value: str | None) -> str | None:
        if value is None:
            raise ValueError("give 'admin' or 'user', or leave role out to keep the user's")
        return value


class DisableIn(_In):
    """A user's disable (admin): ``cancel_jobs`` true cancels their unfinished jobs too,
    running ones stopped with their grace to checkpoint (default false: running jobs run
    on, queued ones are not started); ``reason``: why, stored with the admin's name and
    shown with the user (:func:`~danlu.server.services.disabling.checked_reason`)."""

    cancel_jobs: bool = Field(default=False, strict=True)
    """``true`` or ``false`` only (``1`` or ``"yes"`` is a 422 naming it)."""
    reason: str | None = Field(default=None, strict=True)
    """At most 200 characters, no control character (else a 422 naming it); left out,
    null or blank: none (a disabled user's reason is kept)."""


class UserJobsOut(BaseModel):
    """A user disabled or enabled, and what their unfinished jobs do now: ``queued`` hold no
    GPUs (not started while the user is disabled), ``running`` hold GPUs and run on,
    ``cancelled`` queued ones the disable cancelled, ``stopping`` running ones being
    stopped (``cancel_jobs``)."""

    user: UserOut
    queued: int
    running: int
    cancelled: int
    stopping: int


class UserEventOut(BaseModel):
    """One thing that happened to a user's account (``GET /users/{name}/events``), by
    ``actor`` (null: the control plane itself), ``detail`` saying what in words: a
    ``changed`` event's fields old and new, a ``disabled`` one's reason, a token's public
    prefix and label (never its secret)."""

    id: int
    user: str
    time: float
    kind: Literal["created", "changed", "disabled", "enabled", "token_issued", "token_revoked"]
    actor: str | None
    detail: str


class TokenIn(_In):
    """A new API token's label: no control characters (an admin's ``danlu user tokens``
    prints it, where an ESC sequence or a line break would act on the terminal)."""

    name: str = Field(default="", max_length=64)

    @field_validator("name")
    @classmethod
    def _printable(cls, value: str) -> str:
        char = control_character(value)
        if char is not None:
            raise ValueError(
                "a token's label must not contain control characters (line breaks, tabs, ESC "
                f"sequences, bidirectional overrides), got {char!r} in {value!r}: give a "
                "label without them, e.g. 'laptop'"
            )
        return value


class TokenOut(BaseModel):
    """A new API token (shown once)."""

    token: str


class TokenInfoOut(BaseModel):
    """A live API token, without its secret: ``prefix`` is the ``dl_PREFIX_`` part that
    names it (to revoke it); ``job_id`` is set for the token of a job's run."""

    prefix: str
    name: str
    created_at: float
    last_used_at: float | None
    job_id: str | None


class RevokedOut(BaseModel):
    """How many tokens were revoked."""

    revoked: int


def token_out(token: ApiToken) -> dict[str, Any]:
    """``token`` as the API's TokenInfo object (no secret)."""
    return {
        "prefix": token.prefix,
        "name": token.name,
        "created_at": token.created_at,
        "last_used_at": token.last_used_at,
        "job_id": token.job_id,
    }


def user_out(user: User) -> dict[str, Any]:
    """``user`` as the API's User object."""
    return {
        "name": user.name,
        "role": user.role,
        "os_user": user.os_user,
        "quota_gpus": user.quota_gpus,
        "disabled_at": user.disabled_at,
        "disabled_by": user.disabled_by,
        "disable_reason": user.disable_reason,
    }


def user_event_out(event: UserEvent, user: str) -> dict[str, Any]:
    """``event``, one of the user ``user``'s, as the API's UserEvent object."""
    return {
        "id": event.id,
        "user": user,
        "time": event.time,
        "kind": event.kind,
        "actor": event.actor,
        "detail": event.detail,
    }
