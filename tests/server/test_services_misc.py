"""Users and tokens, admin bootstrap, projects, metrics ingestion, inventory."""

from __future__ import annotations

import stat
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import delete, event

from danlu.core.cluster import Node, gpu_type
from danlu.core.errors import SpecError
from danlu.core.units import GiB
from danlu.server.db import Database
from danlu.server.db.models import ApiToken, Counter
from danlu.server.errors import ConflictError, NotFoundError, PermissionDenied
from danlu.server.routes.deps import checked_name
from danlu.server.services import cluster, jobs, metrics, projects, users

NOW = 1_000_000.0
SPEC = {"name": "m", "command": ["true"], "resources": {"gpus": 1}}


def test_tokens_are_hashed_and_authenticate(db: Database) -> None:
    with db.session() as s:
        alice = users.create_user(s, "alice", now=NOW)
        token = users.issue_token(s, alice, "laptop", now=NOW)
        row = s.query(ApiToken).one()
        assert token not in (row.token_hash, row.prefix) and row.token_hash == users.hash_token(
            token
        )
        assert users.authenticate(s, token, now=NOW + 5) is alice
        assert row.last_used_at == NOW + 5
        for bad in (None, "", "nope", token[:-1] + ("A" if token[-1] != "A" else "B")):
            assert users.authenticate(s, bad) is None
        assert users.revoke_tokens(s, alice) == 1
        assert users.authenticate(s, token) is None
        with pytest.raises(ConflictError):
            users.create_user(s, "alice")
        with pytest.raises(SpecError, match="role"):
            users.create_user(s, "carol", role="root")
        # a trailing newline is not part of a name (``$`` let it through)
        with pytest.raises(SpecError, match="name"):
            users.create_user(s, "carol\n")
        with pytest.raises(SpecError, match="os_user"):
            users.create_user(s, "carol", os_user="carol\n")
        with pytest.raises(NotFoundError):
            checked_name("alice\n", "user")
        with pytest.raises(NotFoundError):
            users.get_user(s, "dave")


def test_a_job_s_new_run_revokes_its_earlier_runs_tokens(db: Database) -> None:
    with db.session() as s:
        alice = users.create_user(s, "alice", now=NOW)
        mine = users.issue_token(s, alice, "laptop", now=NOW)
        first = users.issue_token(s, alice, "job a#1", now=NOW, job_id="aaaaaaaaaaaa")
        other = users.issue_token(s, alice, "job b#1", now=NOW, job_id="bbbbbbbbbbbb")
        row = users.find_token(s, first)
        assert row is not None and row.job_id == "aaaaaaaaaaaa"
        second = users.issue_token(s, alice, "job a#2", now=NOW + 1, job_id="aaaaaaaaaaaa")
        assert users.find_token(s, first) is None  # the earlier run's token is revoked
        for kept in (second, other, mine):
            assert users.authenticate(s, kept) is alice
        assert users.find_token(s, mine).job_id is None  # type: ignore[union-attr]


def test_a_token_s_use_is_stored_at_most_once_a_minute(db: Database) -> None:
    """``last_used_at`` was set inside the request's read session and never stored. A read
    changes nothing now; :func:`users.touch_token` stores a use in a write of its own,
    only once the stored one is a minute old."""
    with db.session() as s:
        alice = users.create_user(s, "alice", now=NOW)
        token = users.issue_token(s, alice, "laptop", now=NOW)
    with db.read_session() as s:
        row = users.find_token(s, token)
        assert row is not None and row.last_used_at is None
        token_id = row.id
    with db.session() as s:
        assert users.touch_token(s, token_id, NOW + 5)
    with db.session() as s:
        assert not users.touch_token(s, token_id, NOW + 30)  # stored 25 s ago: no write
    with db.read_session() as s:
        assert users.find_token(s, token).last_used_at == NOW + 5  # type: ignore[union-attr]
    with db.session() as s:
        assert users.touch_token(s, token_id, NOW + 65)
    with db.read_session() as s:
        assert users.find_token(s, token).last_used_at == NOW + 65  # type: ignore[union-attr]
    assert users.use_is_due(None, NOW) and users.use_is_due(NOW, NOW + 60)
    assert not users.use_is_due(NOW, NOW + 59)


def test_admin_bootstrap_writes_a_private_token_once(db: Database, tmp_path: Path) -> None:
    path = tmp_path / "home" / "admin.token"
    with db.session() as s:
        token = users.bootstrap_admin(s, path, now=NOW)
    assert token is not None and path.read_text().strip() == token
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    with db.session() as s:
        assert users.bootstrap_admin(s, path, now=NOW) is None  # second start: unchanged
        admin = users.authenticate(s, token)
        assert admin is not None and admin.is_admin
    path.unlink()
    with db.session() as s:
        again = users.bootstrap_admin(s, path, now=NOW)
    assert again is not None and again != token and path.read_text().strip() == again


def test_projects_and_quotas(db: Database) -> None:
    with db.session() as s:
        projects.create_project(s, "vision", priority=3, quota_gpus=4, now=NOW)
        assert projects.ensure_default_project(s, NOW).name == "default"
        assert [p.name for p in projects.list_projects(s)] == ["default", "vision"]
        p = projects.update_project(s, "vision", quota_gpu_memory=100 * GiB)
        assert (p.quota_gpus, p.quota_gpu_memory, p.priority) == (4, 100 * GiB, 3)
        p = projects.update_project(s, "vision", quota_gpus=None, priority=1)
        assert (p.quota_gpus, p.priority) == (None, 1)
        with pytest.raises(SpecError, match="quota_gpus"):
            projects.update_project(s, "vision", quota_gpus=-1)
        with pytest.raises(ConflictError):
            projects.create_project(s, "vision")
        with pytest.raises(SpecError, match="name"):
            projects.create_project(s, "audio\n")
        with pytest.raises(NotFoundError):
            projects.get_project(s, "audio")
        assert projects.quota_excess(p, projects.Usage(1, 90 * GiB), projects.Usage(1, 20 * GiB))


def test_inventory_replace_and_load(db: Database) -> None:
    with db.session() as s:
        cluster.replace_inventory(
            s, [Node("a", 2, gpu_type("A100-40GB")), Node("b", 1)], uuids={"a": ["GPU-1"]}
        )
        loaded = cluster.load_cluster(s)
        assert [n.name for n in loaded.nodes] == ["a", "b"] and loaded.total_gpus == 3
        assert loaded.nodes[0].gpu_type == gpu_type("A100-40GB")
        nodes = cluster.list_nodes(s)
        assert [g.uuid for g in nodes[0].gpus] == ["GPU-1", None]
        # a refresh that names no UUIDs keeps those known
        cluster.replace_inventory(s, [Node("a", 2, gpu_type("A100-40GB")), Node("b", 1)])
        assert [g.uuid for g in cluster.list_nodes(s)[0].gpus] == ["GPU-1", None]
        cluster.replace_inventory(s, [Node("b", 4, gpu_type("H100"))])
        loaded = cluster.load_cluster(s)
        assert [(n.name, n.gpus) for n in loaded.nodes] == [("b", 4)]


def test_inventory_memo_reuses_the_cluster_until_the_inventory_changes(db: Database) -> None:
    memo = cluster.InventoryMemo()
    with db.session() as s:
        cluster.replace_inventory(s, [Node("a", 2, gpu_type("A100-40GB")), Node("b", 1)])
        first = cluster.load_cluster(s, memo)
        assert cluster.load_cluster(s, memo) is first
        assert cluster.load_cluster(s) is not first and cluster.load_cluster(s) == first
    with db.session() as s:  # another transaction, same rows: the same object
        assert cluster.load_cluster(s, memo) is first
        cluster.replace_inventory(s, [Node("a", 2, gpu_type("A100-40GB")), Node("b", 2)])
        grown = cluster.load_cluster(s, memo)  # unflushed changes are flushed and seen
        assert grown is not first and [n.gpus for n in grown.nodes] == [2, 2]
        cluster.replace_inventory(s, [Node("a", 2, gpu_type("H100")), Node("b", 2)])
        retyped = cluster.load_cluster(s, memo)
        assert retyped is not grown and retyped.nodes[0].gpu_type == gpu_type("H100")


def test_metrics_ingestion(db: Database) -> None:
    with db.session() as s:
        alice = users.create_user(s, "alice", now=NOW)
        cluster.replace_inventory(s, [Node("n", 1)])
        job = jobs.submit(s, SPEC, alice, now=NOW)
        stored = metrics.ingest(
            s,
            job,
            [
                {"step": 1, "loss": 2.5, "lr": 0.1},
                {"step": 2, "loss": float("nan"), "time": NOW + 2},
                {"step": 3, "checkpoint_step": 3},
            ],
            now=NOW,
        )
        assert stored == 3
        version = job.version
        assert (job.last_step, job.checkpoint_step) == (3, 3)
        assert job.version == version  # progress reports do not bump the job's version
        rows = metrics.list_metrics(s, job.id, after_step=1)
        assert [(r.step, r.data.get("loss", "-")) for r in rows] == [(2, None), (3, "-")]
        for bad, field in [
            ([{"loss": 1}], "metrics.0.step"),
            ([{"step": -1}], "metrics.0.step"),
            ([{"step": 1, "x": [1, 2]}], "metrics.0.x"),
            ([{"step": 1, "time": "noon"}], "metrics.0.time"),
            ([{"step": 2**64}], "metrics.0.step"),  # past the store's 64-bit integers
            ([{"step": 4, "checkpoint_step": 2**63}], "metrics.0.checkpoint_step"),
            # what PostgreSQL's JSON cannot hold (the route's guard before, now the service's)
            ([{"step": 4, "note": "a\x00b"}], "metrics.0.note"),
            ([{"step": 4, "big": 2**70}], "metrics.0.big"),
            ([{"step": 4, "a\x00": 1}], "metrics.0"),
        ]:
            with pytest.raises(SpecError) as err:
                metrics.ingest(s, job, bad)
            assert err.value.field == field


def test_inventory_memo_reads_no_inventory_while_its_counter_stays(db: Database) -> None:
    """With the counter, a round whose inventory did not change reads one row, not the nodes
    and GPUs; every change (a replace, a clear) moves it. A store without the counter row
    compares the rows as before."""
    statements: list[str] = []

    def seen(_conn: Any, _cursor: Any, sql: str, *_: Any) -> None:
        statements.append(sql.lower())

    def reads() -> set[str]:
        return {t for sql in statements for t in ("from nodes", "from gpus") if t in sql}

    memo = cluster.InventoryMemo()
    with db.session() as s:
        cluster.replace_inventory(s, [Node("a", 2), Node("b", 1)])
        first = cluster.load_cluster(s, memo)
    event.listen(db.engine, "before_cursor_execute", seen)
    try:
        with db.session() as s:
            assert cluster.load_cluster(s, memo) is first
            assert reads() == set()
            cluster.replace_inventory(s, [Node("a", 2), Node("b", 1)])  # the same nodes
            statements.clear()
            assert cluster.load_cluster(s, memo) is first  # read again, built from the same rows
            assert reads() == {"from nodes", "from gpus"}
            cluster.clear_inventory(s)
            assert cluster.load_cluster(s, memo).nodes == ()
        with db.session() as s:  # no counter row (an emptied store): the rows decide
            s.execute(delete(Counter))
            statements.clear()
            cleared = cluster.load_cluster(s, memo)
            assert cleared.nodes == () and reads() == {"from nodes", "from gpus"}
            statements.clear()
            assert cluster.load_cluster(s, memo) is cleared and reads()
            cluster.replace_inventory(s, [Node("c", 4)])  # makes the row again
            assert [n.name for n in cluster.load_cluster(s, memo).nodes] == ["c"]
            statements.clear()
            assert [n.name for n in cluster.load_cluster(s, memo).nodes] == ["c"]
            assert reads() == set()
    finally:
        event.remove(db.engine, "before_cursor_execute", seen)


def test_an_id_prefix_is_matched_among_the_viewers_own_jobs(
    seeded: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A user's prefix never names another user's job: it was matched against everyone's,
    so the 403 gave away the full id, and the user's own unique prefix could be ambiguous."""
    ids = iter(["abcd00000001", "abcd10000002"])  # one shared prefix
    monkeypatch.setattr(jobs, "new_job_id", lambda: next(ids))
    with seeded.session() as s:
        alice, bob = users.get_user(s, "alice"), users.get_user(s, "bob")
        jobs.submit(s, {"name": "a", "command": ["true"]}, alice, now=NOW)
        jobs.submit(s, {"name": "b", "command": ["true"]}, bob, now=NOW)
        assert jobs.get_job(s, "abcd", viewer=alice).id == "abcd00000001"
        assert jobs.get_job(s, "abcd", viewer=bob).id == "abcd10000002"
        with pytest.raises(ConflictError):
            jobs.get_job(s, "abcd")  # an admin's view holds both
        with pytest.raises(NotFoundError):  # bob's alone: it was a 403 naming its full id
            jobs.get_job(s, "abcd1", viewer=alice)
        # a full id of another user's job is still the documented 403
        with pytest.raises(PermissionDenied):
            jobs.get_job(s, "abcd10000002", viewer=alice)


def test_an_id_too_short_for_a_prefix_says_how_long_one_must_be(seeded: Database) -> None:
    """``danlu show 2a`` said only "not found" for a job whose id starts with ``2a``."""
    with seeded.session() as s:
        alice = users.get_user(s, "alice")
        job = jobs.submit(s, {"name": "a", "command": ["true"]}, alice, now=NOW)
        with pytest.raises(NotFoundError) as short:
            jobs.get_job(s, job.id[:2], viewer=alice)
        assert str(short.value) == (
            f"job {job.id[:2]!r} not found (an id prefix needs 4 characters or more)"
        )
        assert jobs.get_job(s, job.id[:4], viewer=alice) is job
        with pytest.raises(NotFoundError) as wrong:
            jobs.get_job(s, "zzzzzz", viewer=alice)
        assert str(wrong.value) == "job 'zzzzzz' not found"
