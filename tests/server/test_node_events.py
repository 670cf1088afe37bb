"""A node's history (``node_events``): each cordon, drain, schedule and uncordon is an event
with who did it (an admin, or null for the control plane: a window's start and end, the
health checks, failed launches), a change that changes nothing none; the inventory's
readings tell when a node joined, was lost, came back or changed GPUs, and its backend's
reports when it went out of service and back, each once however many rounds repeat it; a
node listed in another rack or with other CPUs or host memory is ``changed``; each at the
pass's time, not the clock's. And ``GET /cluster/nodes/{name}`` and
``/cluster/nodes/{name}/events``: any user, 404 naming an unknown node, a gone node's history
still read. The services (on SQLite and PostgreSQL) and the app (on SQLite)."""

from __future__ import annotations

from pathlib import Path

from fastapi.testclient import TestClient

from danlu.config import load_settings
from danlu.core.cluster import Cluster, Node, gpu_type
from danlu.core.units import GiB
from danlu.executors import FakeExecutor, FakeWorld
from danlu.server.app import create_app
from danlu.server.db import Database
from danlu.server.health import HealthLoop, HealthProgram, ProgramResult
from danlu.server.inventory import InventoryRefresh
from danlu.server.services import cluster, node_events, nodes, users

T = 1_000_000.0
H100 = gpu_type("H100")


def _history(db: Database, name: str) -> list[tuple[float, str, str | None, str]]:
    with db.read_session() as s:
        rows = node_events.list_node_events(s, name)
        return [(e.time - T, e.kind, e.actor, e.detail) for e in rows]


def test_each_close_and_open_is_told_with_who_did_it(sqlite_db: Database) -> None:
    with sqlite_db.session() as s:
        root = users.create_user(s, "root", "admin", now=T)
        cluster.replace_inventory(s, [Node("a", 2, H100), Node("b", 2, H100)], now=T)
        nodes.cordon(s, "a", "new DIMMs", now=T + 1, by=root)
        nodes.cordon(s, "a", "new DIMMs", now=T + 2, by=root)  # nothing changes: not told
        nodes.cordon(s, "a", "", drain=True, until=T + 50, now=T + 3, by=root)
        nodes.uncordon(s, "a", now=T + 4, by=root)
        nodes.cordon(s, "a", "fan", gpu=1, now=T + 5, by=root)
        nodes.uncordon(s, "a", 1, now=T + 6, by=root)
        nodes.cordon(s, "b", "racking", drain=True, at=T + 10, until=T + 20, now=T + 7, by=root)
        assert nodes.close_due(s, T + 10) == ["b"]
        assert [o.name for o in nodes.open_due(s, T + 20)] == ["b"]
        nodes.launch_failed(s, ["b"], "disk full", limit=1, now=T + 21)
        nodes.close_faulty(s, [("a", 0, "ECC errors")], T + 22)
    at, until = nodes.shown_time(T + 10), nodes.shown_time(T + 20)
    assert _history(sqlite_db, "a") == [
        (0, "joined", None, "in the inventory: 2x H100"),
        (1, "cordoned", "root", "new DIMMs"),
        (3, "drained", "root", f"new DIMMs; until {nodes.shown_time(T + 50)}"),
        (4, "uncordoned", "root", "was draining: new DIMMs"),
        (5, "cordoned", "root", "GPU 1: fan"),
        (6, "uncordoned", "root", "GPU 1: was cordoned: fan"),
        (22, "cordoned", None, "GPU 0: health check: ECC errors"),
    ]
    assert _history(sqlite_db, "b") == [
        (0, "joined", None, "in the inventory: 2x H100"),
        (7, "scheduled", "root", f"drain at {at} until {until}: racking"),
        (10, "drained", None, f"racking; until {until}; as scheduled"),
        (20, "uncordoned", None, "was draining: racking; its window ended"),
        (
            21,
            "cordoned",
            None,
            "1 launches in a row failed for the node's reasons (last: disk full)",
        ),
    ]


def test_a_health_program_close_and_a_dropped_schedule_are_told(sqlite_db: Database) -> None:
    with sqlite_db.session() as s:
        root = users.create_user(s, "root", "admin", now=T)
        cluster.replace_inventory(s, [Node("a", 1, H100)], now=T)
        nodes.close_marked(s, {"a": "NVLink down"}, nodes.PROGRAM_REASON, T + 1)
        nodes.close_marked(s, {"a": "NVLink down"}, nodes.PROGRAM_REASON, T + 2)  # closed
        nodes.reopen_marked(s, ["a"], nodes.PROGRAM_REASON, T + 3)
        nodes.cordon(s, "a", "", at=T + 100, now=T + 4, by=root)
        nodes.uncordon(s, "a", now=T + 5, by=root)
    assert _history(sqlite_db, "a")[1:] == [
        (1, "cordoned", None, "health program: NVLink down"),
        (3, "uncordoned", None, "was cordoned: health program: NVLink down; what closed it passed"),
        (4, "scheduled", "root", f"cordon at {nodes.shown_time(T + 100)}"),
        (5, "uncordoned", "root", f"dropped the scheduled cordon at {nodes.shown_time(T + 100)}"),
    ]


def test_a_node_lost_and_back_is_told_once_however_many_rounds_see_it(db: Database) -> None:
    """Through the inventory's refresh, as the reconcile loop runs it: node ``b`` leaves the
    inventory for three readings and comes back; the backend reports ``a`` down for three,
    then serves it; ``a`` loses two GPUs, then moves to another rack. Each change is one
    event, whatever repeats it, at the time of the pass that saw it."""
    first = Cluster((Node("a", 4, H100), Node("b", 2, H100)))
    with db.session() as s:
        cluster.replace_inventory(s, first.nodes, now=T)
    world = FakeWorld()
    refresh = InventoryRefresh(db, FakeExecutor(first, world), every=10.0)
    refresh.run(T)  # starts the clock
    steps = [
        (Cluster((Node("a", 4, H100),)), {}),
        (Cluster((Node("a", 4, H100),)), {"a": "Slurm reports it DOWN: not responding"}),
        (Cluster((Node("a", 4, H100),)), {"a": "Slurm reports it DOWN: not responding"}),
        (first, {"a": "Slurm reports it DOWN: not responding"}),
        (first, {}),
        (Cluster((Node("a", 2, H100), Node("b", 2, H100))), {}),
        (Cluster((Node("a", 2, H100), Node("b", 2, H100))), {}),
        (Cluster((Node("a", 2, H100, rack="r2"), Node("b", 2, H100))), {}),
        (Cluster((Node("a", 2, H100, rack="r2"), Node("b", 2, H100))), {}),
    ]
    for step, (reading, down) in enumerate(steps, start=1):
        world.cluster, world.out_of_service = reading, down
        refresh.run(T + 10 * step)
    reported = "its backend reports it out of service: Slurm reports it DOWN: not responding"
    assert _history(db, "a") == [
        (0, "joined", None, "in the inventory: 4x H100"),
        (20, "lost", None, reported),
        (50, "back", None, "its backend serves it again"),
        (60, "gpus_changed", None, "4x H100 -> 2x H100"),
        (80, "changed", None, "rack rack-0 -> r2"),
    ]
    assert _history(db, "b") == [
        (0, "joined", None, "in the inventory: 2x H100"),
        (10, "lost", None, "not in the inventory's reading"),
        (40, "back", None, "in the inventory again: 2x H100"),
    ]


def test_a_node_listed_in_another_rack_or_with_other_cpus_or_memory_is_changed(
    db: Database,
) -> None:
    """Each reading that changes a node's rack, CPUs or host memory is one ``changed`` event
    naming what changed, and only that; one that changes its GPUs too writes
    ``gpus_changed`` as well; the same listing again writes nothing."""

    def node(name: str, gpus: int, rack: str, cpus: float, memory_gib: int) -> Node:
        return Node(name, gpus, H100, int(cpus * 1000), memory_gib * GiB, rack)

    readings = [
        [node("a", 8, "r1", 64, 512), node("b", 8, "r1", 64, 512)],
        [node("a", 8, "r2", 32, 256), node("b", 8, "r1", 64, 512)],
        [node("a", 8, "r2", 32, 256), node("b", 8, "r1", 64, 512)],
        [node("a", 4, "r2", 32, 128), node("b", 8, "r1", 64, 512)],
        [node("a", 4, "r2", 32, 128), node("b", 8, "r1", 64, 512)],
        [node("a", 4, "r2", 31.5, 128), node("b", 8, "r1", 64, 512)],
    ]
    for step, reading in enumerate(readings):
        with db.session() as s:
            cluster.replace_inventory(s, reading, now=T + 10 * step)
    assert _history(db, "a") == [
        (0, "joined", None, "in the inventory: 8x H100"),
        (10, "changed", None, "rack r1 -> r2; 64 -> 32 CPUs; 512.0GiB -> 256.0GiB memory"),
        (30, "gpus_changed", None, "8x H100 -> 4x H100"),
        (30, "changed", None, "256.0GiB -> 128.0GiB memory"),
        (50, "changed", None, "32 -> 31.5 CPUs"),
    ]
    assert _history(db, "b") == [(0, "joined", None, "in the inventory: 8x H100")]


class _Verdicts(HealthProgram):
    """A health program that says what it is told to, one verdict a run."""

    def __init__(self, verdicts: list[ProgramResult]) -> None:
        super().__init__("/bin/true")
        self.verdicts = verdicts

    def run(self) -> ProgramResult | None:
        return self.verdicts.pop(0)


def test_a_health_program_pass_times_its_close_and_reopening_by_the_pass(db: Database) -> None:
    with db.session() as s:
        cluster.replace_inventory(s, [Node("a", 1, H100)], now=T)
    program = _Verdicts([ProgramResult(False, "NVLink down"), ProgramResult(True)])
    loop = HealthLoop(db, None, program=program, hosts=["a"])
    assert loop.run_once(now=T + 1) == ["a: closed: health program: NVLink down"]
    assert loop.run_once(now=T + 2) == ["a: reopened"]
    assert _history(db, "a")[1:] == [
        (1, "cordoned", None, "health program: NVLink down"),
        (2, "uncordoned", None, "was cordoned: health program: NVLink down; what closed it passed"),
    ]


def test_a_node_and_its_events_are_read_by_any_user(tmp_path: Path) -> None:
    settings = load_settings(home=tmp_path, fake_gpus="1x80GiB")
    db = Database(settings.db_url)
    with TestClient(create_app(settings, start_loops=False)) as http:
        with db.session() as s:
            root = users.create_user(s, "root", "admin", now=T)
            tokens = {"root": users.issue_token(s, root, now=T)}
            tokens["bob"] = users.issue_token(s, users.create_user(s, "bob", now=T), now=T)
            name = cluster.list_nodes(s)[0].name
            for step in range(3):
                nodes.cordon(s, name, f"check {step}", now=T + step, by=root)
            cluster.replace_inventory(s, [*cluster.load_cluster(s).nodes, Node("gone", 1)])
            cluster.replace_inventory(s, cluster.load_cluster(s).nodes[:1])  # gone is lost
        db.dispose()

        def get(path: str, caller: str = "bob") -> tuple[int, object]:
            reply = http.get(
                f"/api/v1{path}", headers={"Authorization": f"Bearer {tokens[caller]}"}
            )
            return reply.status_code, reply.json()

        code, record = get(f"/cluster/nodes/{name}")
        listed = get("/cluster/nodes")[1]
        assert code == 200 and [record] == listed, record
        code, events = get(f"/cluster/nodes/{name}/events?tail=true&limit=2")
        assert code == 200 and isinstance(events, list), events
        assert [(e["node"], e["kind"], e["actor"], e["detail"]) for e in events] == [
            (name, "cordoned", "root", "check 1"),
            (name, "cordoned", "root", "check 2"),
        ]
        after = get(f"/cluster/nodes/{name}/events?after_id={events[0]['id']}")[1]
        assert [e["detail"] for e in after] == ["check 2"]  # type: ignore[index]
        code, error = get("/cluster/nodes/gone")
        assert code == 404 and "node 'gone' not found (not in the inventory now" in str(error)
        code, gone = get("/cluster/nodes/gone/events")
        assert code == 200 and [e["kind"] for e in gone] == ["joined", "lost"], gone  # type: ignore[union-attr,index]
        listed = "node 'nosuch' not found (danlu nodes, GET /cluster/nodes, lists them)"
        code, error = get("/cluster/nodes/nosuch/events")
        assert code == 404 and listed in str(error), error
        code, error = get("/cluster/nodes/nosuch")
        assert code == 404 and listed in str(error), error
        code, error = get(f"/cluster/nodes/{name}/events?limit=1001", "root")
        assert code == 422 and "limit" in str(error), error
