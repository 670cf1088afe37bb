"""The models of webhooks and of their deliveries."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field, field_validator

from danlu.server.routes.schemas.base import StateName, _In


class WebhookIn(_In):
    """A new webhook (admin): the endpoint, the job states it hears of (default SUCCEEDED,
    FAILED, CANCELLED), and optionally the one project or user whose jobs count."""

    url: str = Field(max_length=2048)
    states: list[StateName] | None = Field(default=None, max_length=7)
    project: str | None = Field(default=None, max_length=63)
    user: str | None = Field(default=None, max_length=64)

    @field_validator("states", mode="before")
    @classmethod
    def _states_in_any_case(cls, value: Any) -> Any:
        """The state names in any case, as ``GET /jobs?state=`` reads them (``Failed`` is
        ``FAILED``); what is not a name is left for the check, which lists the valid ones."""
        if isinstance(value, list):
            return [name.upper() if isinstance(name, str) else name for name in value]
        return value


class WebhookOut(BaseModel):
    """A webhook, with its deliveries kept by outcome. ``secret`` is only in the reply that
    created it: the key of the ``X-Danlu-Signature`` HMAC of every message."""

    id: str
    url: str
    states: list[StateName]
    project: str | None
    user: str | None
    created_at: float
    created_by: str
    pending: int
    delivered: int
    failed: int
    last_error: str | None
    secret: str | None = None


class DeliveryOut(BaseModel):
    """One message to a webhook: ``done_at`` is set once delivered (``delivered``) or given
    up; ``status_code`` and ``last_error`` tell of the last attempt."""

    id: int
    kind: str
    job_id: str | None
    event: dict[str, Any]
    created_at: float
    attempts: int
    next_attempt_at: float
    done_at: float | None
    delivered: bool
    status_code: int | None
    last_error: str | None
