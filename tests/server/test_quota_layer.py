"""The server and the simulator keep quotas alike: :class:`danlu.sched.quota.QuotaPolicy`,
handed the store's view without quotas, withholds the same jobs with the same reasons and cuts
the same elastic ranges as the server's snapshot with them."""

from __future__ import annotations

from helpers import user_and_nodes

from danlu.core.cluster import Node, gpu_type
from danlu.core.state import JobState
from danlu.core.units import GiB
from danlu.sched.quota import Quota, QuotaPolicy, Quotas
from danlu.sched.view import ClusterView, Plan
from danlu.server.db import Database
from danlu.server.db.models import User
from danlu.server.services import jobs, projects, users
from danlu.server.services.view import build_snapshot

T = 1_000_000.0
NODES = (Node("a", 8, gpu_type("H100")), Node("b", 8, gpu_type("H100")))


class _Seeing:
    name = "seeing"

    def __init__(self) -> None:
        self.view: ClusterView | None = None

    def schedule(self, view: ClusterView) -> Plan:
        self.view = view
        return Plan()


def _gpus(node: str, *gpus: int, memory: int = 80 * GiB) -> list[dict[str, object]]:
    return [{"node": node, "gpu": g, "milli": 1000, "memory": memory} for g in gpus]


def test_the_quota_layer_sees_what_the_servers_snapshot_sees(db: Database) -> None:
    with db.session() as s:
        alice = user_and_nodes(s, NODES, T)
        bob = users.create_user(s, "bob", now=T)
        projects.create_project(s, "vision", now=T)
        projects.create_project(s, "nlp", now=T)
        projects.create_project(s, "speech", now=T)

        def submit(name: str, who: User, project: str, gpus: object, **res: object) -> str:
            body = {"name": name, "command": ["true"], "project": project}
            body["resources"] = {"gpus": gpus, **res}
            return jobs.submit(s, body, who, now=T).id

        # running: vision holds 4 GPUs (with "grow"), nlp 6 (480 GiB), alice 4 in all
        for name, who, project, alloc in (
            ("v1", alice, "vision", _gpus("a", 0, 1)),
            ("v2", bob, "vision", _gpus("a", 2)),
            ("n1", bob, "nlp", _gpus("b", 0, 1, 2, 3)),
            ("n2", alice, "nlp", _gpus("a", 3, 4)),
        ):
            job = jobs.get_job(s, submit(name, who, project, len(alloc)))
            jobs.change_state(s, job, JobState.RUNNING, "go", T, allocation=alloc)
        grow = jobs.get_job(s, submit("grow", bob, "vision", "1..8"))
        jobs.change_state(s, grow, JobState.RUNNING, "go", T, allocation=_gpus("a", 5))
        grow_id = grow.id
        for name, who, project, gpus in (
            ("p1", alice, "vision", 1),  # vision 4 + 1 > 4
            ("p2", bob, "nlp", 2),  # nlp 480 + 160 GiB > 560 GiB
            ("p3", alice, "nlp", 1),  # alice 4 + 1 > 4
            ("p4", bob, "vision", "1..6"),  # vision 4 + 1 > 4
            ("p5", bob, "nlp", "2..8"),  # at least 2 GPUs: 160 GiB, too
            ("p6", bob, "default", 3),
            ("p8", bob, "speech", "2..8"),  # speech's quota leaves 6 of its 8
        ):
            submit(name, who, project, gpus)
        submit("p7", bob, "nlp", 1, gpu_memory="20GiB")  # 480 + 20 GiB fit
    with db.session() as s:
        free = build_snapshot(s, T + 10)
        assert not free.withheld
        projects.update_project(s, "vision", quota_gpus=4)
        projects.update_project(s, "nlp", quota_gpu_memory=560 * GiB)
        projects.update_project(s, "speech", quota_gpus=6)
        users.set_quota(s, "alice", 4)
        limited = build_snapshot(s, T + 10)
    quotas = Quotas(
        {
            "vision": Quota("project 'vision'", gpus=4),
            "nlp": Quota("project 'nlp'", gpu_memory=560 * GiB),
            "speech": Quota("project 'speech'", gpus=6),
        },
        {"alice": Quota("user 'alice'", gpus=4)},
    )
    seeing = _Seeing()
    plan = QuotaPolicy(seeing, quotas).schedule(free.view)
    assert seeing.view is not None
    # the same jobs wait, for the same reasons
    waiting = {job_id: plan.reason(job_id) for job_id in limited.withheld}
    assert waiting == limited.withheld and len(waiting) == 5
    assert any("memory quota" in why for why in waiting.values())

    def ranges(view: ClusterView) -> dict[str, tuple[int, int]]:
        jobs_ = (*view.running, *view.pending)
        return {j.id: (j.request.gpus, j.request.max_gpus) for j in jobs_}

    assert ranges(seeing.view) == ranges(limited.view)
    assert ranges(limited.view)[grow_id] == (1, 1)  # vision's quota is full: no growth
    assert ranges(free.view)[grow_id] == (1, 8)
    assert sorted(ranges(limited.view).values()).count((2, 6)) == 1  # p8's range, cut
