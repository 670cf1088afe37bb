"""An admin's cordon or drain with no reason (the CLI's default) of a GPU the health check
had closed makes the cordon the admin's, as it does a node's: a reading of the inventory
that lacks the GPU for a while keeps the admin's cordon (the health check's own is
forgotten with the GPU), and the GPU comes back closed. An admin's reason that begins with
the mark of a close the control plane takes back by itself is refused, naming ``reason``."""

from __future__ import annotations

import pytest
from helpers import user_and_nodes
from sqlalchemy import update

from danlu.core.cluster import Node, gpu_type
from danlu.core.errors import SpecError
from danlu.core.units import GiB
from danlu.server.db import Database
from danlu.server.db.models import Node as NodeRow
from danlu.server.routes.schemas import nodes_out
from danlu.server.services import cluster, nodes

NOW = 1_000_000.0
A = Node("a", 2, gpu_type("H100"))


def _gpus(db: Database) -> dict[int, tuple[str, str]]:
    with db.read_session() as s:
        (node,) = cluster.list_nodes(s)
        return {g.index: (nodes.state(g), g.cordon_reason) for g in node.gpus}


def test_an_admin_s_gpu_cordon_of_a_gpu_the_health_check_closed_outlives_its_absence(
    db: Database,
) -> None:
    with db.session() as s:
        user_and_nodes(s, (A,), NOW)
        closed = nodes.close_faulty(s, [("a", 0, "Xid 79"), ("a", 1, "Xid 48")], now=NOW)
        assert closed == ["a GPU 0: health check: Xid 79", "a GPU 1: health check: Xid 48"]
    with db.session() as s:
        nodes.cordon(s, "a", "", gpu=1, now=NOW + 1)  # `danlu cordon a --gpu 1`
    assert _gpus(db)[1] == ("cordoned", nodes.ADMIN_REASON)
    with db.session() as s:  # both GPUs fall off the reading, then come back
        cluster.replace_inventory(s, [Node("a", 0, gpu_type("H100"))], fake=True, now=NOW + 2)
    with db.session() as s:
        cluster.replace_inventory(s, [A], fake=True, now=NOW + 3)
    assert _gpus(db) == {0: ("ready", ""), 1: ("cordoned", nodes.ADMIN_REASON)}


def test_an_admin_s_gpu_drain_with_no_reason_is_the_admin_s_and_a_reason_given_is_kept(
    db: Database,
) -> None:
    with db.session() as s:
        user_and_nodes(s, (A,), NOW)
        nodes.close_faulty(s, [("a", 0, "Xid 79")], now=NOW)
        nodes.cordon(s, "a", "  ", drain=True, gpu=0, now=NOW + 1)
        nodes.cordon(s, "a", "bad fan", gpu=1, now=NOW + 1)
        nodes.cordon(s, "a", "", drain=True, gpu=1, now=NOW + 2)
    assert _gpus(db) == {0: ("draining", nodes.ADMIN_REASON), 1: ("draining", "bad fan")}


def test_an_admin_s_reason_that_begins_with_a_mark_of_the_control_plane_is_refused(
    db: Database,
) -> None:
    """A reason beginning ``executor: `` made the admin's cordon the backend's: the first
    sync after a start reopened the node; ``health check: `` made a GPU's the health
    check's, forgotten when a reading lacked the GPU."""
    with db.session() as s:
        user_and_nodes(s, (A,), NOW)
    for reason, gpu, mark in (
        ("executor: PSU swap", None, "executor: "),
        ("  health program: disk", None, "health program: "),
        ("health check: fan noisy", 0, "health check: "),
    ):
        with db.session() as s, pytest.raises(SpecError) as refused:
            nodes.cordon(s, "a", reason, gpu=gpu, now=NOW)
        assert refused.value.field == "reason"
        assert f"begins with {mark!r}" in refused.value.message
        assert "word it otherwise" in refused.value.message
    with db.session() as s, pytest.raises(SpecError, match="begins with 'executor: '"):
        nodes.cordon(s, "a", "executor: later", drain=True, at=NOW + 60, now=NOW)
    with db.session() as s:  # nothing was closed or scheduled
        (node,) = cluster.list_nodes(s)
        assert (nodes.state(node), node.close_at) == ("ready", None)
        # a mark of the other kind is the admin's own words there: kept
        nodes.cordon(s, "a", "health check: by hand", now=NOW)
        nodes.cordon(s, "a", "executor: by hand", gpu=1, now=NOW)
    with db.session() as s:
        assert nodes.sync_backend(s, {}, now=NOW + 1) == ([], [])
    assert _gpus(db)[1] == ("cordoned", "executor: by hand")
    with db.read_session() as s:
        (node,) = cluster.list_nodes(s)
        assert (nodes.state(node), node.cordon_reason) == ("cordoned", "health check: by hand")


def test_a_close_scheduled_with_a_marked_reason_before_the_check_still_applies(
    db: Database,
) -> None:
    with db.session() as s:
        user_and_nodes(s, (A,), NOW)
        nodes.cordon(s, "a", "window", at=NOW + 10, now=NOW)
    with db.session() as s:  # stored by an earlier version, which took any reason
        s.execute(update(NodeRow).values(close_reason="executor: old words"))
    with db.session() as s:
        assert nodes.close_due(s, now=NOW + 10) == ["a"]
    with db.read_session() as s:
        (node,) = cluster.list_nodes(s)
        assert (nodes.state(node), node.cordon_reason) == ("cordoned", "executor: old words")


def test_a_cordon_s_reply_leaves_out_a_gpu_the_reading_lacks_as_the_node_list_does(
    db: Database,
) -> None:
    """The reply of a cordon, drain or uncordon (:func:`nodes_out` of the node changed)
    listed a GPU kept absent for an admin's cordon, with ``memory: -1``, which ``GET
    /cluster/nodes`` leaves out."""
    with db.session() as s:
        user_and_nodes(s, (A,), NOW)
        nodes.cordon(s, "a", "bad fan", gpu=1, now=NOW)
    with db.session() as s:  # GPU 1 is gone from the reading: kept absent, still cordoned
        cluster.replace_inventory(s, [Node("a", 1, gpu_type("H100"))], fake=True, now=NOW + 1)
    for change in (
        lambda s: nodes.cordon(s, "a", "maintenance", now=NOW + 2),
        lambda s: nodes.uncordon(s, "a"),
    ):
        with db.session() as s:
            (reply,) = nodes_out([change(s)], cluster.list_shares(s))
            (listed,) = nodes_out(cluster.list_nodes(s), cluster.list_shares(s))
        assert [(g["index"], g["memory"]) for g in reply["gpus"]] == [(0, 80 * GiB)]
        assert reply["gpus"] == listed["gpus"]
    with db.session() as s:  # it returns still closed
        cluster.replace_inventory(s, [A], fake=True, now=NOW + 3)
    assert _gpus(db)[1] == ("cordoned", "bad fan")
