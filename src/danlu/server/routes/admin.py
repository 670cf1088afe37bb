"""``/api/v1``: health, projects, cluster, users and tokens."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Annotated, Any, Final

from fastapi import APIRouter, Depends, Query
from sqlalchemy.orm import Session

from danlu.core.errors import SpecError
from danlu.core.values import MAX_INT
from danlu.server.db import Node, User
from danlu.server.errors import PermissionDenied
from danlu.server.routes.deps import (
    Caller,
    ServerState,
    State,
    checked_name,
    require_admin,
    single_valued,
    version,
)
from danlu.server.routes.schemas import (
    AllocationOut,
    CordonIn,
    DisableIn,
    HealthOut,
    NodeEventOut,
    NodeOut,
    ProjectIn,
    ProjectOut,
    ProjectPatch,
    RevokedOut,
    TokenIn,
    TokenInfoOut,
    TokenOut,
    UncordonIn,
    UsageOut,
    UserEventOut,
    UserIn,
    UserJobsOut,
    UserOut,
    UserPatch,
    node_event_out,
    nodes_out,
    project_out,
    sees_holder,
    token_out,
    user_event_out,
    user_out,
)
from danlu.server.run_as import check_os_user
from danlu.server.services import (
    cluster,
    disabling,
    members,
    node_events,
    nodes,
    projects,
    usage,
    user_events,
    users,
)

router = APIRouter(dependencies=[Depends(single_valued)])

USAGE_DAYS = 7.0
"""The period ``/usage`` reports without ``since``: the last week."""


@router.get("/health", response_model=HealthOut, tags=["health"], summary="Liveness")
def health() -> dict[str, str]:
    """``{"status": "ok", "version"}``; needs no token."""
    return {"status": "ok", "version": version()}


@router.get("/projects", response_model=list[ProjectOut], tags=["projects"])
def list_projects(user: Caller, state: State) -> list[dict[str, Any]]:
    """Every project with its priority, quotas and fair-share weight, the GPUs it holds and
    its recent usage."""
    with state.db.read_session() as session:
        half_life = state.usage_half_life
        standing = usage.standing(session, time.time(), half_life)
        idle = usage.Standing(0.0, 0.0 if half_life > 0 else None)
        listed = members.members_by_project(session)
        return [
            project_out(p, standing.get(p.name, idle), listed.get(p.id))
            for p in projects.list_projects(session)
        ]


@router.post("/projects", status_code=201, response_model=ProjectOut, tags=["projects"])
def create_project(body: ProjectIn, user: Caller, state: State) -> dict[str, Any]:
    """Create a project (admin)."""
    require_admin(user)
    with state.db.session() as session:
        project = projects.create_project(
            session,
            body.name,
            body.priority,
            body.quota_gpus,
            body.quota_gpu_memory,
            share=body.share,
        )
        listed = members.set_members(session, project, body.members)
        notes = projects.share_notes(body.share, state.settings.policy)
        return {**project_out(project, members=listed), "notes": notes}


@router.put("/projects/{name}", response_model=ProjectOut, tags=["projects"])
def update_project(name: str, body: ProjectPatch, user: Caller, state: State) -> dict[str, Any]:
    """Change a project's priority, quotas, fair-share weight or members (admin); absent
    fields stay as they are."""
    require_admin(user)
    checked_name(name, "project", "name")
    given = body.model_fields_set
    with state.db.session() as session:
        project = projects.update_project(
            session,
            name,
            priority=body.priority,
            quota_gpus=body.quota_gpus if "quota_gpus" in given else projects.UNSET,
            quota_gpu_memory=(
                body.quota_gpu_memory if "quota_gpu_memory" in given else projects.UNSET
            ),
            share=body.share,
        )
        if body.members is not None:
            listed = members.set_members(session, project, body.members)
        else:
            listed = members.members(session, project)
        notes = projects.share_notes(body.share, state.settings.policy)
        return {**project_out(project, members=listed), "notes": notes}


@router.get("/cluster/nodes", response_model=list[NodeOut], tags=["cluster"])
def list_nodes(user: Caller, state: State) -> list[dict[str, Any]]:
    """Nodes and GPUs with what is allocated on each GPU."""
    with state.db.read_session() as session:
        return nodes_out(cluster.list_nodes(session), cluster.list_shares(session), user)


@router.get("/cluster/nodes/{name}", response_model=NodeOut, tags=["cluster"])
def get_node(name: str, user: Caller, state: State) -> dict[str, Any]:
    """One node, as ``GET /cluster/nodes`` lists it; 404 naming the node when the
    inventory does not list it (saying so when it has a history: a node gone)."""
    checked_name(name, "node", "name")
    with state.db.read_session() as session:
        node = cluster.get_node(session, name)
        shares = [s for s in cluster.list_shares(session) if s.node == node.name]
        return nodes_out([node], shares, user)[0]


@router.get("/cluster/nodes/{name}/events", response_model=list[NodeEventOut], tags=["cluster"])
def list_node_events(
    name: str,
    user: Caller,
    state: State,
    after_id: Annotated[int, Query(ge=0, le=MAX_INT)] = 0,
    limit: Annotated[int, Query(ge=1, le=node_events.MAX_EVENTS)] = 100,
    tail: bool = False,
) -> list[dict[str, Any]]:
    """What happened to the node, oldest first: joined, lost, back, its GPUs changed,
    cordoned, drained, scheduled, uncordoned, each by whom (null: the control plane);
    those after event ``after_id``, at most ``limit``, the oldest of them (``tail``: the
    newest, oldest first). A node gone from the inventory keeps its history; 404 naming
    the node for a name with neither a row nor a history."""
    checked_name(name, "node", "name")
    with state.db.read_session() as session:
        rows = node_events.list_node_events(
            session, name, after_id=after_id, limit=limit, tail=tail
        )
        if not rows:
            node_events.check_known(session, name)
        return [node_event_out(e) for e in rows]


@router.post("/cluster/nodes/{name}/cordon", response_model=NodeOut, tags=["cluster"])
def cordon_node(
    name: str, user: Caller, state: State, body: CordonIn | None = None
) -> dict[str, Any]:
    """Close a node to new work (admin): nothing is started, grown or moved onto it; the
    jobs there run on. Cordoning again replaces the reason. With ``at`` in the future, it
    is scheduled for then; with ``until``, it ends then (the node uncordoned). With ``gpu``,
    only that GPU of the node is closed. Every field is optional: no body is ``{}``."""
    got = body if body is not None else CordonIn()
    return _change_node(
        name,
        user,
        state,
        lambda s: nodes.cordon(
            s, name, got.reason, at=got.at, gpu=got.gpu, until=got.until, by=user
        ),
    )


@router.post("/cluster/nodes/{name}/drain", response_model=NodeOut, tags=["cluster"])
def drain_node(
    name: str, user: Caller, state: State, body: CordonIn | None = None
) -> dict[str, Any]:
    """Cordon a node and preempt its preemptible jobs by checkpoint (admin): they resume
    elsewhere; a job that is not preemptible runs to its end there. With ``at`` in the
    future, it is scheduled for then (a maintenance window), and with ``until`` it ends then
    (the node uncordoned). With ``gpu``, only that GPU of the node is drained (the jobs
    holding it). No body is ``{}``."""
    got = body if body is not None else CordonIn()
    return _change_node(
        name,
        user,
        state,
        lambda s: nodes.cordon(
            s, name, got.reason, drain=True, at=got.at, gpu=got.gpu, until=got.until, by=user
        ),
    )


@router.post("/cluster/nodes/{name}/uncordon", response_model=NodeOut, tags=["cluster"])
def uncordon_node(
    name: str, user: Caller, state: State, body: UncordonIn | None = None
) -> dict[str, Any]:
    """Open a cordoned or drained node to new work again, and drop a cordon or drain
    scheduled for it (admin); its GPUs cordoned on their own stay so. With ``gpu``, open
    only that GPU of the node."""
    gpu = body.gpu if body is not None else None
    return _change_node(name, user, state, lambda s: nodes.uncordon(s, name, gpu, by=user))


def _change_node(
    name: str, user: User, state: ServerState, change: Callable[[Session], Node]
) -> dict[str, Any]:
    """``change`` node ``name`` in a transaction, as an admin; the node as the API shows it."""
    require_admin(user)
    checked_name(name, "node", "name")
    with state.db.session() as session:
        node = change(session)
        shares = [s for s in cluster.list_shares(session) if s.node == node.name]
        return nodes_out([node], shares)[0]


@router.get("/cluster/allocations", response_model=list[AllocationOut], tags=["cluster"])
def list_allocations(user: Caller, state: State) -> list[dict[str, Any]]:
    """Every GPU share held by a running (or checkpointing) job; a non-admin gets their own
    jobs' (as ``GET /jobs`` lists them; ``GET /cluster/nodes`` shows what the others hold)."""
    with state.db.read_session() as session:
        return [
            {"job_id": s.job_id, "node": s.node, "gpu": s.gpu, "milli": s.milli, "memory": s.memory}
            for s in cluster.list_shares(session)
            if sees_holder(user, s)
        ]


@router.get("/usage", response_model=list[UsageOut], tags=["cluster"])
def get_usage(
    user: Caller,
    state: State,
    since: Annotated[float | None, Query(allow_inf_nan=False)] = None,
    until: Annotated[float | None, Query(allow_inf_nan=False)] = None,
) -> list[dict[str, Any]]:
    """GPU-hours, GPU-memory GiB-hours and energy (kWh, where metered) by project and user
    in ``[since, until)`` (POSIX seconds; default: the last 7 days until now), most
    GPU-hours first; a non-admin sees their own. Without ``since`` the period is the 7
    days before ``until``, or before now for an ``until`` still to come (nothing is used
    after now: the 7 days before a far ``until`` held nothing, and one past ~1e300 took
    ``since`` for that ``until`` and refused the request, naming ``since``, never sent)."""
    now = time.time()
    end = now if until is None else until
    if since is None:
        start = min(end, now) - USAGE_DAYS * 86_400.0
        if start >= end:  # an ``until`` so far back that 7 days do not move off it
            raise SpecError("until", "is too far in the past; give since too, or a later until")
    else:
        start = since
        if start >= end and until is None:  # the period ends now: no until was given
            raise SpecError(
                "since",
                "is not in the past: without until the period ends now; give a since "
                "before now, or an until after since",
            )
        if start >= end:
            raise SpecError("since", "must come before until")
    with state.db.read_session() as session:
        rows = usage.usage(session, start, end, user_id=None if user.is_admin else user.id, now=now)
    return [
        {
            "project": r.project,
            "user": r.user,
            "gpu_hours": r.gpu_seconds / 3600.0,
            "gpu_memory_gib_hours": r.gpu_memory_byte_seconds / 3600.0 / 2**30,
            "jobs": r.jobs,
            "energy_kwh": None if r.energy is None else r.energy / 3.6e6,
        }
        for r in rows
    ]


@router.get("/users/me", response_model=UserOut, tags=["users"])
def me(user: Caller) -> dict[str, Any]:
    """The caller."""
    return user_out(user)


@router.get("/users", response_model=list[UserOut], tags=["users"])
def list_users(user: Caller, state: State) -> list[dict[str, Any]]:
    """Every user, by name (admin)."""
    require_admin(user)
    with state.db.read_session() as session:
        return [user_out(u) for u in users.list_users(session)]


@router.post("/users", status_code=201, response_model=UserOut, tags=["users"])
def create_user(body: UserIn, user: Caller, state: State) -> dict[str, Any]:
    """Create a user (admin)."""
    require_admin(user)
    check_os_user(state.settings, body.os_user)
    with state.db.session() as session:
        made = users.create_user(session, body.name, body.role, os_user=body.os_user, by=user)
        return user_out(made)


@router.get("/users/{name}", response_model=UserOut, tags=["users"])
def get_user(name: str, user: Caller, state: State) -> dict[str, Any]:
    """One user, as ``GET /users`` lists them (an admin, or the user itself); 404 naming the
    user when there is none."""
    _own_or_admin(
        name, user, "see the record", "danlu user show {me}, GET /users/{me}, shows your own"
    )
    with state.db.read_session() as session:
        return user_out(users.get_user(session, name))


@router.get("/users/{name}/events", response_model=list[UserEventOut], tags=["users"])
def list_user_events(
    name: str,
    user: Caller,
    state: State,
    after_id: Annotated[int, Query(ge=0, le=MAX_INT)] = 0,
    limit: Annotated[int, Query(ge=1, le=user_events.MAX_EVENTS)] = 100,
    tail: bool = False,
) -> list[dict[str, Any]]:
    """What happened to the user's account, oldest first (an admin, or the user itself):
    created, changed, disabled, enabled, tokens issued and revoked, each by whom; those
    after event ``after_id``, at most ``limit``, the oldest of them (``tail``: the newest,
    oldest first)."""
    _own_or_admin(
        name, user, "see the events", "danlu user show {me}, GET /users/{me}/events, lists your own"
    )
    with state.db.read_session() as session:
        owner = users.get_user(session, name)
        rows = user_events.list_user_events(
            session, owner, after_id=after_id, limit=limit, tail=tail
        )
        return [user_event_out(e, owner.name) for e in rows]


@router.put("/users/{name}", response_model=UserOut, tags=["users"])
def update_user(name: str, body: UserPatch, user: Caller, state: State) -> dict[str, Any]:
    """Change a user's role, ``os_user`` or GPU quota (admin); a field left out stays as it
    is. 409 naming ``role`` for making the last enabled admin a user."""
    require_admin(user)
    checked_name(name, "user", "name")
    if "os_user" in body.model_fields_set:
        check_os_user(state.settings, body.os_user)
    given = body.model_fields_set
    with state.db.session() as session:
        changed = users.update_user(
            session,
            name,
            role=users.KEPT if body.role is None else body.role,
            os_user=body.os_user if "os_user" in given else users.KEPT,
            quota_gpus=body.quota_gpus if "quota_gpus" in given else users.KEPT,
            by=user,
        )
        return user_out(changed)


@router.post("/users/{name}/disable", response_model=UserJobsOut, tags=["users"])
def disable_user(
    name: str, user: Caller, state: State, body: DisableIn | None = None
) -> dict[str, Any]:
    """Disable a user (admin): their API tokens are refused (401, saying so), none is
    issued to them, no job is submitted in their name, and their queued jobs are not
    started until they are enabled again; they stay listed, as their jobs and usage do.
    Their running jobs run on (``running`` counts them) unless ``cancel_jobs`` is true:
    then every unfinished job of theirs is cancelled and their running sweeps end.
    ``reason``, why, is stored with the caller's name (``disable_reason``, ``disabled_by``).
    Disabling a disabled user changes nothing more (a ``reason`` given replaces the one
    stored; with ``cancel_jobs``, cancels what is left). 409 naming ``name`` for the last
    enabled admin. No body is ``{}``."""
    require_admin(user)
    checked_name(name, "user", "name")
    cancel_jobs = body is not None and body.cancel_jobs
    reason = body.reason if body is not None else None
    with state.db.session() as session:
        done = disabling.disable(session, name, user, reason=reason, cancel_jobs=cancel_jobs)
        reply = _user_jobs_out(done)
    if state.wake is not None and cancel_jobs:  # the running jobs' stops: in the next pass
        state.wake()
    return reply


@router.post("/users/{name}/enable", response_model=UserJobsOut, tags=["users"])
def enable_user(name: str, user: Caller, state: State) -> dict[str, Any]:
    """Enable a disabled user again (admin): their tokens not revoked meanwhile work again,
    and their queued jobs are scheduled as before (``queued`` counts them). Enabling an
    enabled user changes nothing. Who disabled them and why is cleared."""
    require_admin(user)
    checked_name(name, "user", "name")
    with state.db.session() as session:
        reply = _user_jobs_out(disabling.enable(session, name, by=user))
    if state.wake is not None and reply["queued"]:
        state.wake()
    return reply


def _user_jobs_out(done: disabling.UserJobs) -> dict[str, Any]:
    """``done`` as the API's reply to a disable or an enable."""
    return {
        "user": user_out(done.user),
        "queued": done.queued,
        "running": done.running,
        "cancelled": done.cancelled,
        "stopping": done.stopping,
    }


OWN_TOKENS_LISTED: Final = "danlu user tokens {me}, GET /users/{me}/tokens, lists your own"
"""The end of the 403 of ``GET /users/{name}/tokens`` to a non-admin naming another user:
the CLI command and the route that list the caller's own (``{me}``: the caller's name), as
the other routes under ``/users/{name}`` name theirs."""


def _own_or_admin(
    name: str, user: User, doing: str = "see or change the tokens", own: str = OWN_TOKENS_LISTED
) -> None:
    """404 for a name that is no name; 403 unless ``user`` is ``name`` or an admin (the
    message: who may ``doing`` of ``name``, then ``own`` with ``{me}`` the caller's name:
    the CLI command and the route that do it for the caller's own, as
    ``danlu user ls, GET /users, lists them`` is written)."""
    checked_name(name, "user", "name")
    if name != user.name and not user.is_admin:
        # not require_admin's "this route is for admins": the user itself may use it too
        raise PermissionDenied(
            f"only {name!r} or an admin may {doing} of {name!r}; "
            f"{user.name!r} is neither: {own.format(me=user.name)}"
        )


@router.post("/users/{name}/tokens", status_code=201, response_model=TokenOut, tags=["users"])
def issue_token(name: str, body: TokenIn, user: Caller, state: State) -> dict[str, str]:
    """Issue an API token for ``name`` (an admin, or the user itself); shown once. 409 when
    the user holds ``MAX_LIVE_TOKENS`` (100) live tokens of its own already (its jobs' runs'
    not counted): the message says how to list and revoke them."""
    own = "danlu user token {me}, POST /users/{me}/tokens, issues one of your own"
    _own_or_admin(name, user, own=own)  # the label's control characters: refused by TokenIn
    with state.db.session() as session:
        owner = users.get_user(session, name)
        return {"token": users.issue_token(session, owner, body.name, by=user)}


@router.get("/users/{name}/tokens", response_model=list[TokenInfoOut], tags=["users"])
def list_tokens(name: str, user: Caller, state: State) -> list[dict[str, Any]]:
    """``name``'s live tokens, without their secrets (an admin, or the user itself)."""
    _own_or_admin(name, user)
    with state.db.read_session() as session:
        return [token_out(t) for t in users.live_tokens(session, users.get_user(session, name))]


@router.delete("/users/{name}/tokens", response_model=RevokedOut, tags=["users"])
def revoke_tokens(name: str, user: Caller, state: State) -> dict[str, int]:
    """Revoke every live token of ``name``, its job runs' too (an admin, or the user
    itself): for a token that leaked, or a user who left. Its running jobs can no longer
    report metrics until their next run."""
    _own_or_admin(
        name, user, own="danlu user revoke {me}, DELETE /users/{me}/tokens, revokes your own"
    )
    with state.db.session() as session:
        owner = users.get_user(session, name)
        return {"revoked": users.revoke_tokens(session, owner, by=user)}


@router.delete("/users/{name}/tokens/{prefix}", response_model=RevokedOut, tags=["users"])
def revoke_token(name: str, prefix: str, user: Caller, state: State) -> dict[str, int]:
    """Revoke the live token of ``name`` whose public prefix is ``prefix`` (``dl_PREFIX_``);
    404 when there is none (an admin, or the user itself)."""
    own = "danlu user revoke {me} PREFIX, DELETE /users/{me}/tokens/PREFIX, revokes one of your own"
    _own_or_admin(name, user, own=own)
    checked_name(prefix, "token", "prefix")
    with state.db.session() as session:
        owner = users.get_user(session, name)
        return {"revoked": users.revoke_tokens(session, owner, prefix=prefix, by=user)}
