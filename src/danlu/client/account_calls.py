"""The :class:`~danlu.client.rest.Client`'s calls that send one request and read its reply:
the server's health, users and API tokens, projects, the cluster's nodes and usage, and
webhooks (:class:`AccountCalls`), over the ``request`` the client defines (its retries,
followers and waits stay in :mod:`danlu.client.rest`)."""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Sequence
from typing import Any

import httpx

from danlu.client.bodies import clean, listed, seg
from danlu.client.replies import malformed, records, shaped
from danlu.core.errors import SpecError


class AccountCalls:
    """The plain request-and-reply calls of the API's accounts and administration, and the
    readers of a reply's JSON (:meth:`_object`, :meth:`_records`, :meth:`_field`) every call
    of the :class:`~danlu.client.rest.Client` uses."""

    @abstractmethod
    def request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        """Send one request; raise the mapped :class:`~danlu.client.errors.ApiError` on a
        3xx/4xx/5xx answer (:meth:`danlu.client.rest.Client.request`)."""

    def _object(self, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        """The reply to a request that answers one JSON object."""
        return dict(shaped(self.request(method, path, **kwargs), dict))

    def _records(self, method: str, path: str, **kwargs: Any) -> list[dict[str, Any]]:
        """The reply to a request that answers a JSON array of objects."""
        return records(self.request(method, path, **kwargs))

    def _field(self, method: str, path: str, key: str, kind: type[Any], **kwargs: Any) -> Any:
        """The value of ``key``, of type ``kind`` (str or int), in the JSON object a
        request answers."""
        response = self.request(method, path, **kwargs)
        value = shaped(response, dict).get(key)
        if not isinstance(value, kind) or isinstance(value, bool):
            raise malformed(response, f"the reply has no {kind.__name__} {key!r}")
        return value

    # -- health and identity ----------------------------------------------------------------

    def health(self) -> dict[str, Any]:
        """``GET /health``: ``{"status": "ok", "version"}`` (needs no token)."""
        return self._object("GET", "/health")

    def me(self) -> dict[str, Any]:
        """``GET /users/me``: the caller, ``{"name", "role"}``."""
        return self._object("GET", "/users/me")

    def create_user(
        self, name: str, role: str = "user", os_user: str | None = None
    ) -> dict[str, Any]:
        """``POST /users`` (admin); ``os_user``: the OS account its jobs run as with
        ``DANLU_RUN_AS=user`` (None: the one named like it)."""
        body: dict[str, Any] = {"name": name, "role": role}
        if os_user is not None:
            body["os_user"] = os_user
        return self._object("POST", "/users", json=body)

    def update_user(self, name: str, **fields: Any) -> dict[str, Any]:
        """``PUT /users/{name}`` (admin) with the fields to change: ``role`` (``admin`` or
        ``user``), ``os_user`` (the OS account its jobs run as; None: the one named like it),
        ``quota_gpus`` (None: none)."""
        return self._object("PUT", f"/users/{seg(name, 'name')}", json=fields)

    def disable_user(
        self, name: str, cancel_jobs: bool = False, reason: str | None = None
    ) -> dict[str, Any]:
        """``POST /users/{name}/disable`` (admin): refuse the user's tokens and start none
        of their queued jobs until enabled again; ``cancel_jobs``: cancel their unfinished
        jobs too (running ones stopped); ``reason``: why (stored with the admin's name).
        Returns ``{"user", "queued", "running", "cancelled", "stopping"}``: the User and
        what their unfinished jobs do now."""
        if not isinstance(cancel_jobs, bool):  # "no" would read as true
            raise SpecError("cancel_jobs", f"give True or False, not {cancel_jobs!r}")
        body: dict[str, Any] = {"cancel_jobs": cancel_jobs}
        if reason is not None:
            body["reason"] = reason
        return self._object("POST", f"/users/{seg(name, 'name')}/disable", json=body)

    def enable_user(self, name: str) -> dict[str, Any]:
        """``POST /users/{name}/enable`` (admin): the user's tokens work again and their
        queued jobs are scheduled; the reply as :meth:`disable_user`'s."""
        return self._object("POST", f"/users/{seg(name, 'name')}/enable")

    def create_token(self, user: str, name: str = "") -> str:
        """``POST /users/{name}/tokens``: a new API token for ``user`` (shown once)."""
        path = f"/users/{seg(user, 'user')}/tokens"
        return str(self._field("POST", path, "token", str, json={"name": name}))

    def users(self) -> list[dict[str, Any]]:
        """``GET /users`` (admin): every user, ``{"name", "role", ..., "disabled_at",
        "disabled_by", "disable_reason"}``."""
        return self._records("GET", "/users")

    def user(self, name: str) -> dict[str, Any]:
        """``GET /users/{name}`` (admin, or the user itself): one User, as :meth:`users`
        lists them."""
        return self._object("GET", f"/users/{seg(name, 'name')}")

    def user_events(
        self,
        name: str,
        after_id: int | None = None,
        limit: int | None = None,
        tail: bool = False,
    ) -> list[dict[str, Any]]:
        """``GET /users/{name}/events`` (admin, or the user itself): what happened to the
        user's account, oldest first, ``{"id", "user", "time", "kind", "actor",
        "detail"}``, after event ``after_id``; ``tail``: the newest ``limit`` of them."""
        return self._history(f"/users/{seg(name, 'name')}/events", after_id, limit, tail)

    def _history(
        self, path: str, after_id: int | None, limit: int | None, tail: bool
    ) -> list[dict[str, Any]]:
        """``GET`` a history's page at ``path`` (a user's or a node's events): those after
        event ``after_id``, at most ``limit``, the newest with ``tail``."""
        params = clean({"after_id": after_id, "limit": limit, "tail": "true" if tail else None})
        return self._records("GET", path, params=params)

    def tokens(self, user: str) -> list[dict[str, Any]]:
        """``GET /users/{name}/tokens``: ``user``'s live tokens, without their secrets."""
        return self._records("GET", f"/users/{seg(user, 'user')}/tokens")

    def revoke_tokens(self, user: str, prefix: str | None = None) -> int:
        """``DELETE /users/{name}/tokens[/{prefix}]``: revoke ``user``'s live tokens, or the
        one whose public prefix is ``prefix``; how many were revoked."""
        if prefix is not None and not prefix:
            raise SpecError("prefix", "the token prefix is empty; give a prefix of a token")
        path = f"/users/{seg(user, 'user')}/tokens" + (
            f"/{seg(prefix, 'prefix')}" if prefix is not None else ""
        )
        return int(self._field("DELETE", path, "revoked", int))

    # -- webhooks (admin) ---------------------------------------------------------------------

    def create_webhook(
        self,
        url: str,
        *,
        states: str | Sequence[str] | None = None,
        project: str | None = None,
        user: str | None = None,
    ) -> dict[str, Any]:
        """``POST /webhooks``: tell ``url`` of job state changes (``states``; default the
        ends); returns the Webhook with its ``secret`` (shown this once)."""
        body = clean(
            {"url": url, "states": listed(states, "states"), "project": project, "user": user}
        )
        return self._object("POST", "/webhooks", json=body)

    def webhooks(self) -> list[dict[str, Any]]:
        """``GET /webhooks``: every webhook with its deliveries by outcome."""
        return self._records("GET", "/webhooks")

    def remove_webhook(self, webhook: str) -> None:
        """``DELETE /webhooks/{id}``: remove a webhook and its deliveries."""
        self.request("DELETE", f"/webhooks/{seg(webhook, 'webhook')}")

    def ping_webhook(self, webhook: str) -> dict[str, Any]:
        """``POST /webhooks/{id}/ping``: queue a ping message; returns its Delivery."""
        return self._object("POST", f"/webhooks/{seg(webhook, 'webhook')}/ping")

    def webhook_deliveries(self, webhook: str, limit: int | None = None) -> list[dict[str, Any]]:
        """``GET /webhooks/{id}/deliveries``: its messages kept, newest first."""
        params = clean({"limit": limit})
        return self._records(
            "GET", f"/webhooks/{seg(webhook, 'webhook')}/deliveries", params=params
        )

    # -- projects and cluster ---------------------------------------------------------------

    def projects(self) -> list[dict[str, Any]]:
        """``GET /projects``."""
        return self._records("GET", "/projects")

    def create_project(
        self,
        name: str,
        priority: int = 0,
        quota_gpus: float | None = None,
        quota_gpu_memory: int | None = None,
        share: float = 1.0,
        members: str | Sequence[str] = (),
    ) -> dict[str, Any]:
        """``POST /projects`` (admin); ``share``: its weight in the fair-share policy;
        ``members``: the users who may submit to it (none: every user)."""
        body = {
            "name": name,
            "priority": priority,
            "quota_gpus": quota_gpus,
            "quota_gpu_memory": quota_gpu_memory,
            "share": share,
            "members": listed(members, "members"),
        }
        return self._object("POST", "/projects", json=body)

    def update_project(self, name: str, **fields: Any) -> dict[str, Any]:
        """``PUT /projects/{name}`` with a partial Project (admin)."""
        return self._object("PUT", f"/projects/{seg(name, 'name')}", json=fields)

    def nodes(self) -> list[dict[str, Any]]:
        """``GET /cluster/nodes``: nodes with their GPUs, allocated memory and jobs."""
        return self._records("GET", "/cluster/nodes")

    def node(self, name: str) -> dict[str, Any]:
        """``GET /cluster/nodes/{name}``: one Node, as :meth:`nodes` lists it."""
        return self._object("GET", f"/cluster/nodes/{seg(name, 'node')}")

    def node_events(
        self,
        name: str,
        after_id: int | None = None,
        limit: int | None = None,
        tail: bool = False,
    ) -> list[dict[str, Any]]:
        """``GET /cluster/nodes/{name}/events``: what happened to the node, oldest first,
        ``{"id", "node", "time", "kind", "actor", "detail"}``, after event ``after_id``;
        ``tail``: the newest ``limit`` of them."""
        return self._history(f"/cluster/nodes/{seg(name, 'node')}/events", after_id, limit, tail)

    def cordon(
        self,
        node: str,
        reason: str = "",
        *,
        drain: bool = False,
        at: float | None = None,
        gpu: int | None = None,
        until: float | None = None,
    ) -> dict[str, Any]:
        """``POST /cluster/nodes/{name}/cordon`` (``drain``: ``.../drain``; admin): close the
        node (``gpu``: only its GPU at that index) to new work (and preempt its jobs by
        checkpoint), now or ``at`` (POSIX seconds) when that is later, until ``until``
        (POSIX seconds; None: until uncordoned); returns the Node."""
        action = "drain" if drain else "cordon"
        body: dict[str, Any] = {"reason": reason}
        if at is not None:
            body["at"] = at
        if until is not None:
            body["until"] = until
        if gpu is not None:
            body["gpu"] = gpu
        return self._object("POST", f"/cluster/nodes/{seg(node, 'node')}/{action}", json=body)

    def uncordon(self, node: str, gpu: int | None = None) -> dict[str, Any]:
        """``POST /cluster/nodes/{name}/uncordon`` (admin): open the node (``gpu``: only its
        GPU at that index) again."""
        body = {"gpu": gpu} if gpu is not None else None
        return self._object("POST", f"/cluster/nodes/{seg(node, 'node')}/uncordon", json=body)

    def usage(self, since: float | None = None, until: float | None = None) -> list[dict[str, Any]]:
        """``GET /usage``: GPU-hours by project and user in ``[since, until)``."""
        params = clean({"since": since, "until": until})
        return self._records("GET", "/usage", params=params)

    def allocations(self) -> list[dict[str, Any]]:
        """``GET /cluster/allocations``: ``[{"job_id", "node", "gpu", "milli", "memory"}]``."""
        return self._records("GET", "/cluster/allocations")
