"""One control plane a Ray cluster (:mod:`danlu.executors.ray_claim`), against a fake Ray
(``fake_ray``): a plane of another home is refused while the holder's claim lives, naming it;
the same home takes its own claim over; a claim whose driver is gone, or that was given back,
is taken; a claim lost under a running plane is made again; a look before a plane's home is
made claims nothing (``danlu server`` refused: ``test_ray_claim_start.py``)."""

from __future__ import annotations

import logging
import os
import socket
from pathlib import Path

import pytest
from fake_ray import FakeActorClass, FakeRay

from danlu.core.errors import ConfigError
from danlu.executors import ray_claim
from danlu.executors.ray_claim import (
    CLAIM_ACTOR,
    CLAIM_ID_FILE,
    ClaimRecord,
    ClusterClaim,
    ClusterClaimedError,
    home_id,
    probe_record,
)
from danlu.executors.ray_executor import RayExecutor, check_unclaimed


def plane(home: Path, url: str | None = "http://a-host:8470") -> RayExecutor:
    """The executor of a plane of ``home`` (its state in ``home/executor``)."""
    return RayExecutor(home / "executor", address="10.0.0.9:6379", api_url=url, plane_home=home)


def holder(fake: FakeRay) -> ClaimRecord | None:
    actor = fake.actors.get(CLAIM_ACTOR)
    if actor is None or actor.is_dead:
        return None
    return ClaimRecord.read(actor.instance.claim())


def test_a_plane_of_another_home_is_refused_naming_the_holder(
    fake: FakeRay, tmp_path: Path
) -> None:
    first = plane(tmp_path / "a")
    assert fake.actors[CLAIM_ACTOR].options["scheduling_strategy"].node_id == "id-driver"
    with pytest.raises(ClusterClaimedError) as refused:
        plane(tmp_path / "b", url="http://b-host:8470")
    said = str(refused.value)
    assert isinstance(refused.value, ConfigError)  # danlu server: exit 2
    assert "the Ray cluster at 10.0.0.9:6379 is held by another danlu control plane" in said
    assert f"home {(tmp_path / 'a').resolve()} on {socket.gethostname()}" in said
    assert f"pid {os.getpid()}, http://a-host:8470) since 20" in said and " UTC" in said
    assert "--url http://a-host:8470" in said and "stop it" in said
    assert refused.value.holder is not None and refused.value.holder.home.endswith("/a")
    held = holder(fake)
    assert held is not None and held.url == "http://a-host:8470"  # the first keeps its claim
    first.close()


def test_the_same_home_takes_its_own_claim_over(fake: FakeRay, tmp_path: Path) -> None:
    """A plane restarted on its home (or a standby on the shared home) whose old process's
    claim is still there: taken over, not refused."""
    plane(tmp_path / "a", url="http://old:1")
    old = fake.actors[CLAIM_ACTOR]
    plane(tmp_path / "a", url="http://new:2")
    assert old.is_dead and CLAIM_ACTOR in fake.killed
    held = holder(fake)
    assert held is not None and held.url == "http://new:2"
    assert held.id == home_id(tmp_path / "a" / "executor")


def test_a_claim_whose_driver_is_gone_is_taken(fake: FakeRay, tmp_path: Path) -> None:
    plane(tmp_path / "a")
    fake.actors[CLAIM_ACTOR].dead()  # its driver ended: Ray ended the actor it owned
    plane(tmp_path / "b", url="http://b:1")
    held = holder(fake)
    assert held is not None and held.url == "http://b:1"


def test_a_claim_given_back_at_close_lets_another_plane_in(fake: FakeRay, tmp_path: Path) -> None:
    first = plane(tmp_path / "a")
    first.close()
    assert holder(fake) is None
    plane(tmp_path / "b", url="http://b:1")
    held = holder(fake)
    assert held is not None and held.url == "http://b:1"


def test_an_executor_without_a_plane_claims_nothing(fake: FakeRay, tmp_path: Path) -> None:
    RayExecutor(tmp_path / "state", address=None)
    assert CLAIM_ACTOR not in fake.actors


def test_a_holder_that_does_not_answer_refuses_after_the_wait(
    fake: FakeRay, tmp_path: Path
) -> None:
    plane(tmp_path / "a")
    fake.actors[CLAIM_ACTOR].hanging = True  # its node lost, Ray not aware yet
    import ray  # the fake

    (tmp_path / "b").mkdir()
    record = ray_claim.claim_record(tmp_path / "b", tmp_path / "b", None, 0.0)
    claim = ClusterClaim(ray, record, lambda what, call: call(), wait=0.3)
    with pytest.raises(ClusterClaimedError) as refused:
        claim.take()
    assert "which did not say which within 0.3 s" in str(refused.value)
    assert refused.value.holder is None and not claim.held


def test_a_claim_lost_under_a_running_plane_is_made_again(
    fake: FakeRay, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    ex = plane(tmp_path / "a")
    fake.actors[CLAIM_ACTOR].dead()  # its worker killed (Ray's memory monitor)
    ex.refresh_inventory()
    held = holder(fake)
    assert held is not None and held.home.endswith("/a")
    fake.actors[CLAIM_ACTOR].dead()
    plane(tmp_path / "b", url="http://b:1")  # took the free name meanwhile
    with caplog.at_level(logging.ERROR, "danlu.executors.ray_executor"):
        ex.refresh_inventory()
        ex.refresh_inventory()  # said once
    lost = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert len(lost) == 1 and "http://b:1" in lost[0] and "stop one of them" in lost[0]


def test_the_home_id_is_kept_and_a_damaged_one_replaced(tmp_path: Path) -> None:
    first = home_id(tmp_path)
    assert home_id(tmp_path) == first and len(first) == 32
    assert (tmp_path / CLAIM_ID_FILE).stat().st_mode & 0o777 == 0o600
    (tmp_path / CLAIM_ID_FILE).write_text("garbage")
    replaced = home_id(tmp_path)
    assert replaced != first and home_id(tmp_path) == replaced


def test_a_holder_that_says_nothing_readable_refuses_at_once(fake: FakeRay, tmp_path: Path) -> None:
    class Other:
        def claim(self) -> str:
            return "not a claim"

    FakeActorClass(fake, Other).options(name=CLAIM_ACTOR, namespace="danlu").remote()
    with pytest.raises(ClusterClaimedError) as refused:
        plane(tmp_path / "b")
    assert "which says nothing readable of itself" in str(refused.value)
    assert f"ray.get_actor('{CLAIM_ACTOR}', namespace='danlu')" in str(refused.value)


def test_a_plane_whose_claim_its_own_home_took_over_says_so_without_error(
    fake: FakeRay, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    old = plane(tmp_path / "a", url="http://old:1")
    plane(tmp_path / "a", url="http://new:2")  # a standby on the shared home, say
    with caplog.at_level(logging.WARNING, "danlu.executors.ray_executor"):
        old.refresh_inventory()
    said = [r for r in caplog.records if "taken over by" in r.getMessage()]
    assert len(said) == 1 and "http://new:2" in said[0].getMessage()
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
    held = holder(fake)
    assert held is not None and held.url == "http://new:2"  # not taken back


def test_a_look_before_the_home_is_made_claims_nothing(fake: FakeRay, tmp_path: Path) -> None:
    """:func:`~danlu.executors.ray_executor.check_unclaimed`, asked before a plane's home is
    made: a free cluster passes and another home's live claim refuses, neither making an actor
    or a file; the plane's own home's claim passes, left for its executor to take over."""
    other = tmp_path / "b"
    check_unclaimed(other / "executor", other, "10.0.0.9:6379")
    assert CLAIM_ACTOR not in fake.actors and not other.exists()
    plane(tmp_path / "a")
    held = fake.actors[CLAIM_ACTOR]
    with pytest.raises(ClusterClaimedError, match="is held by another danlu control plane"):
        check_unclaimed(other / "executor", other, "10.0.0.9:6379")
    assert not other.exists()
    check_unclaimed(tmp_path / "a" / "executor", tmp_path / "a", "10.0.0.9:6379")
    assert fake.actors[CLAIM_ACTOR] is held and not held.is_dead
    held.hanging = True  # its node lost, Ray not aware yet: asked again for the wait
    import ray  # the fake

    record = probe_record(other, other / "executor")
    look = ClusterClaim(ray, record, lambda what, call: call(), wait=0.3)
    with pytest.raises(ClusterClaimedError, match=r"which did not say which within 0\.3 s"):
        look.check_unclaimed()
    assert not other.exists()
