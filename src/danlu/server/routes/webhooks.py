"""``/api/v1/webhooks``: HTTP endpoints told of job state changes (admin only: the control
plane posts to the URL given, so only an admin may point it somewhere)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Response

from danlu.server.db import Webhook, WebhookDelivery
from danlu.server.routes.deps import Caller, State, checked_name, require_admin, single_valued
from danlu.server.routes.schemas import DeliveryOut, WebhookIn, WebhookOut
from danlu.server.services import webhook_urls, webhooks

router = APIRouter(prefix="/webhooks", tags=["webhooks"], dependencies=[Depends(single_valued)])


def webhook_out(hook: Webhook, counts: webhooks.Counts | None = None) -> dict[str, Any]:
    """The API form of a webhook (without its secret, its URL's password redacted:
    :func:`~danlu.server.services.webhook_urls.shown_url`)."""
    tally = counts or webhooks.Counts()
    return {
        "id": hook.id,
        "url": webhook_urls.shown_url(hook.url),
        "states": list(hook.states),
        "project": None if hook.project is None else hook.project.name,
        "user": None if hook.user is None else hook.user.name,
        "created_at": hook.created_at,
        "created_by": hook.created_by,
        "pending": tally.pending,
        "delivered": tally.delivered,
        "failed": tally.failed,
        "last_error": tally.last_error,
    }


def delivery_out(delivery: WebhookDelivery) -> dict[str, Any]:
    """The API form of one delivery."""
    return {
        "id": delivery.id,
        "kind": delivery.kind,
        "job_id": delivery.job_id,
        "event": dict(delivery.payload),
        "created_at": delivery.created_at,
        "attempts": delivery.attempts,
        "next_attempt_at": delivery.next_attempt_at,
        "done_at": delivery.done_at,
        "delivered": delivery.delivered,
        "status_code": delivery.status_code,
        "last_error": delivery.last_error,
    }


@router.post("", status_code=201, response_model=WebhookOut, summary="Add a webhook")
def create_webhook(body: WebhookIn, user: Caller, state: State) -> dict[str, Any]:
    """Register an endpoint (admin); the reply holds its ``secret``, shown this once."""
    require_admin(user)
    with state.db.session() as session:
        hook = webhooks.create(
            session,
            body.url,
            user.name,
            states=body.states,
            project=body.project,
            user=body.user,
        )
        return webhook_out(hook) | {"secret": hook.secret}


@router.get("", response_model=list[WebhookOut], summary="List the webhooks")
def list_webhooks(user: Caller, state: State) -> list[dict[str, Any]]:
    """Every webhook with its deliveries by outcome (admin)."""
    require_admin(user)
    with state.db.read_session() as session:
        counts = webhooks.counts(session)
        return [webhook_out(h, counts.get(h.seq)) for h in webhooks.list_webhooks(session)]


@router.delete("/{webhook_id}", status_code=204, summary="Remove a webhook")
def remove_webhook(webhook_id: str, user: Caller, state: State) -> Response:
    """Remove a webhook and its deliveries, sent or not (admin)."""
    require_admin(user)
    checked_name(webhook_id, "webhook")
    with state.db.session() as session:
        webhooks.remove(session, webhook_id)
    return Response(status_code=204)


@router.post(
    "/{webhook_id}/ping", status_code=202, response_model=DeliveryOut, summary="Ping a webhook"
)
def ping_webhook(webhook_id: str, user: Caller, state: State) -> dict[str, Any]:
    """Queue a ``ping`` message to the endpoint (admin): its delivery tells whether the URL
    answers (``GET .../deliveries``)."""
    require_admin(user)
    checked_name(webhook_id, "webhook")
    with state.db.session() as session:
        out = delivery_out(webhooks.ping(session, webhook_id))
    if state.webhooks is not None:
        state.webhooks.wake()
    return out


@router.get(
    "/{webhook_id}/deliveries", response_model=list[DeliveryOut], summary="A webhook's messages"
)
def list_deliveries(
    webhook_id: str,
    user: Caller,
    state: State,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> list[dict[str, Any]]:
    """The webhook's deliveries kept (7 days after they are done), newest first (admin)."""
    require_admin(user)
    checked_name(webhook_id, "webhook")
    with state.db.read_session() as session:
        return [delivery_out(d) for d in webhooks.deliveries(session, webhook_id, limit)]
