"""Who may submit to a project: its members (``project_members``). A project without
members is open to every user, as ``default`` is; one with members takes jobs, sweeps and
reruns owned by its members or by an admin only, so that a project's quota, priority and
fair-share weight are its members' (a user cannot take another team's share by naming its
project). Membership is checked when a job or a sweep is submitted; jobs already queued
or running stay when a member is removed.
"""

from __future__ import annotations

from collections.abc import Iterable

from sqlalchemy import delete, insert, select
from sqlalchemy.orm import Session

from danlu.core.errors import SpecError
from danlu.core.values import check_values
from danlu.server.db.models import Project, ProjectMember, User
from danlu.server.errors import PermissionDenied
from danlu.server.services.common import lock_row


def members(session: Session, project: Project) -> list[str]:
    """The names of ``project``'s members, sorted (empty: open to every user)."""
    query = (
        select(User.name)
        .join(ProjectMember, ProjectMember.user_id == User.id)
        .where(ProjectMember.project_id == project.id)
        .order_by(User.name)
    )
    return list(session.scalars(query))


def members_by_project(session: Session) -> dict[int, list[str]]:
    """Every project's members (projects without members left out), by project id."""
    query = (
        select(ProjectMember.project_id, User.name)
        .join(User, ProjectMember.user_id == User.id)
        .order_by(User.name)
    )
    out: dict[int, list[str]] = {}
    for project_id, name in session.execute(query):
        out.setdefault(project_id, []).append(name)
    return out


def set_members(session: Session, project: Project, names: Iterable[str]) -> list[str]:
    """Make ``names`` the members of ``project`` (none: open to every user); returns them
    sorted. An unknown user name is a :class:`SpecError` naming ``members``, one with a NUL
    character one naming ``members.N``. Concurrent calls for one project take turns: the
    last to commit sets the list."""
    given = list(names)
    check_values(given, "members")  # no NUL characters: PostgreSQL's text takes none
    wanted = sorted(set(given))
    found = dict(session.execute(select(User.name, User.id).where(User.name.in_(wanted))).all())
    unknown = [name for name in wanted if name not in found]
    if unknown:
        raise SpecError(
            "members", f"unknown user(s) {', '.join(map(repr, unknown))}; add them first"
        )
    # Concurrent replacements of one project's list take turns (its row locked until the
    # transaction ends): each deletes the list the one before inserted, then inserts its own.
    lock_row(session, Project, project.id)
    session.execute(delete(ProjectMember).where(ProjectMember.project_id == project.id))
    if wanted:
        rows = [{"project_id": project.id, "user_id": found[name]} for name in wanted]
        session.execute(insert(ProjectMember), rows)
    session.flush()
    return wanted


def check_member(session: Session, project: Project, owner: User) -> None:
    """:class:`PermissionDenied` unless ``owner`` may own jobs in ``project``: an admin, a
    member, or anyone in a project without members."""
    if owner.is_admin:
        return
    listed = session.scalars(
        select(ProjectMember.user_id).where(ProjectMember.project_id == project.id)
    ).all()
    if listed and owner.id not in listed:
        raise PermissionDenied(
            f"{owner.name!r} is not a member of project {project.name!r}; an admin "
            f"adds them with: danlu project set {project.name} --members ...,{owner.name}",
            field="project",
        )
