"""dstack-style row locks: disjoint claims, expiry, stale tokens cannot write back."""

from __future__ import annotations

import threading

from danlu.core.cluster import Node
from danlu.server.db import Database
from danlu.server.db.models import Job
from danlu.server.services import cluster, jobs, locks, users

NOW = 1_000_000.0
SPEC = {"name": "l", "command": ["true"], "resources": {"gpus": 1}}


def _jobs(db: Database, count: int) -> list[str]:
    with db.session() as s:
        alice = users.create_user(s, "alice", now=NOW)
        cluster.replace_inventory(s, [Node("n", 1)])
        return [jobs.submit(s, SPEC, alice, now=NOW + i).id for i in range(count)]


def test_two_sessions_claim_disjoint_sets(db: Database) -> None:
    ids = _jobs(db, 20)
    with db.sessionmaker() as one, db.sessionmaker() as two:
        a = locks.claim(one, Job, ids[:14], "token-a", ttl=30, now=NOW)
        b = locks.claim(two, Job, ids[6:], "token-b", ttl=30, now=NOW)
    assert a == sorted(ids[:14]) and b == sorted(ids[14:])


def test_concurrent_fetchers_never_share_a_row(db: Database) -> None:
    _jobs(db, 30)
    got: dict[str, list[str]] = {}

    def fetch(name: str) -> None:
        with db.sessionmaker() as s:
            claimed: list[str] = []
            while True:
                batch = locks.claim_where(
                    s,
                    Job,
                    [Job.state == "PENDING"],
                    name,
                    ttl=30,
                    now=NOW,
                    limit=4,
                    order_by=[Job.seq],
                )
                new = [i for i in batch if i not in claimed]
                if not new:
                    break
                claimed += new
            got[name] = claimed

    threads = [threading.Thread(target=fetch, args=(f"w{i}",)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    everything = [i for ids in got.values() for i in ids]
    assert len(everything) == len(set(everything)) == 30


def test_expired_lock_is_reclaimed_and_stale_token_cannot_write(db: Database) -> None:
    (job_id,) = _jobs(db, 1)
    with db.sessionmaker() as s:
        assert locks.claim(s, Job, [job_id], "old", ttl=10, now=NOW) == [job_id]
        assert locks.claim(s, Job, [job_id], "new", ttl=10, now=NOW + 5) == []
        assert locks.extend(s, Job, [job_id], "old", ttl=10, now=NOW + 5) == [job_id]
        assert locks.claim(s, Job, [job_id], "new", ttl=10, now=NOW + 16) == [job_id]
        assert not locks.update_if_token(s, Job, job_id, "old", {"pending_reason": "stale"})
        assert not locks.holds(s, Job, job_id, "old")
        assert locks.update_if_token(s, Job, job_id, "new", {"pending_reason": "fresh"})
        s.commit()
        assert locks.release_if_token(s, Job, [job_id], "old") == 0
        assert locks.release_if_token(s, Job, [job_id], "new") == 1
        assert locks.claim(s, Job, [job_id], "third", ttl=10, now=NOW + 17) == [job_id]
    with db.read_session() as s:
        assert jobs.get_job(s, job_id).pending_reason == "fresh"


def test_lease_is_exclusive_until_it_expires(db: Database) -> None:
    with db.sessionmaker() as one, db.sessionmaker() as two:
        assert locks.acquire_lease(one, "scheduler", "a", ttl=10, now=NOW)
        assert not locks.acquire_lease(two, "scheduler", "b", ttl=10, now=NOW + 1)
        assert locks.acquire_lease(one, "scheduler", "a", ttl=10, now=NOW + 9)  # renew
        assert not locks.acquire_lease(two, "scheduler", "b", ttl=10, now=NOW + 12)
        assert locks.acquire_lease(two, "scheduler", "b", ttl=10, now=NOW + 20)
