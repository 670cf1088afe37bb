"""``GET /jobs`` and ``GET /events`` filtered by a ``user`` or ``project`` that does not
exist are a 404 naming that parameter: they answered ``[]``, so that an admin's typo in a
user's name (``?user=alcie``) read as that user having no jobs. A name that exists but has
no jobs is still ``[]``, and so is the ``default`` project before any job made it."""

from __future__ import annotations

import pytest

from danlu.server.db import Database
from danlu.server.errors import NotFoundError, PermissionDenied
from danlu.server.services import events, jobs, users

NOW = 1_000_000.0  # the clock of the seeded store
BODY = {"name": "j", "command": ["python", "t.py"], "resources": {"gpus": 1}}


@pytest.mark.parametrize("field", ["user", "project"])
def test_a_job_listing_of_a_name_that_does_not_exist_is_not_found(
    seeded: Database, field: str
) -> None:
    with seeded.session() as s:
        root = users.get_user(s, "root")
        jobs.submit(s, BODY, users.get_user(s, "alice"), now=NOW)
    with seeded.read_session() as s:
        with pytest.raises(NotFoundError) as missing:
            jobs.list_jobs(s, viewer=root, **{field: "nobody"})  # type: ignore[arg-type]
        assert missing.value.field == field
        assert "'nobody' not found" in str(missing.value)
        with pytest.raises(NotFoundError) as missing:
            events.feed(s, viewer=root, **{field: "nobody"})  # type: ignore[arg-type]
        assert missing.value.field == field


def test_a_listing_of_a_name_with_no_jobs_is_empty(seeded: Database) -> None:
    with seeded.session() as s:
        root = users.get_user(s, "root")
        jobs.submit(s, BODY, users.get_user(s, "alice"), now=NOW)
    with seeded.read_session() as s:
        assert jobs.list_jobs(s, viewer=root, user="bob") == []
        assert events.feed(s, viewer=root, user="bob") == []
        assert len(jobs.list_jobs(s, viewer=root, user="alice", project="default")) == 1


def test_the_default_project_before_any_job_lists_nothing(seeded: Database) -> None:
    with seeded.read_session() as s:
        root = users.get_user(s, "root")
        assert jobs.list_jobs(s, viewer=root, project="default") == []


def test_a_user_naming_another_is_refused_whether_or_not_it_exists(seeded: Database) -> None:
    """The 403 comes first: a non-admin learns nothing of which users exist."""
    with seeded.read_session() as s:
        alice = users.get_user(s, "alice")
        for name in ("bob", "nobody"):
            with pytest.raises(PermissionDenied):
                jobs.list_jobs(s, viewer=alice, user=name)
