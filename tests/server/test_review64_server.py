"""The control plane: the user names a job spec or the CLI give a meaning to
(``default``: the caller, ``all``/``everyone``: every user) are refused at user creation, and a
webhook URL whose host the sender could never encode is refused at creation naming ``url``
(rather than accepted and failing every delivery with an IDNA error)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from helpers import live_server, user_and_nodes

from danlu.cli.project import _members
from danlu.core.cluster import Node, gpu_type
from danlu.core.errors import SpecError
from danlu.server.db import Database
from danlu.server.services import jobs, users, webhooks

T = 1_000_000.0
BODY: dict[str, Any] = {"command": ["python", "train.py"]}


@pytest.mark.parametrize("name", ["default", "all", "everyone", "Default", "ALL", "Everyone"])
def test_a_reserved_user_name_is_refused(db: Database, name: str) -> None:
    with db.session() as s, pytest.raises(SpecError, match="reserved") as refused:
        users.create_user(s, name, now=T)
    assert refused.value.field == "name"
    with db.session() as s:
        assert [u.name for u in users.list_users(s)] == []
        # names that only contain or start like them are fine
        for fine in ("defaults", "allison", "everyone2", "all-hands", "my.default"):
            users.create_user(s, fine, now=T)


def test_user_default_in_a_spec_still_means_the_caller(db: Database) -> None:
    with db.session() as s:
        alice = user_and_nodes(s, (Node("a", 4, gpu_type("H100")),), T)
        admin = users.create_user(s, "admin", "admin", now=T)
        mine = jobs.submit(s, {"name": "mine", "user": "default", **BODY}, admin, now=T)
        assert mine.user.name == "admin" and mine.spec["user"] == "admin"
        hers = jobs.submit(s, {"name": "hers", **BODY}, alice, now=T)  # user left out: default
        assert hers.user.name == "alice" and hers.spec["user"] == "alice"
        for_her = jobs.submit(s, {"name": "for-her", "user": "alice", **BODY}, admin, now=T)
        assert for_her.user.name == "alice"


def test_the_api_refuses_reserved_user_names_and_keeps_owners(tmp_path: Path, db_url: str) -> None:
    with (
        live_server(tmp_path, fake_gpus="1x80GiB", db_url=db_url, start_loops=False) as live,
        live.client() as admin,
    ):
        for name in ("default", "all", "everyone"):
            refused = admin.post("/users", json={"name": name})
            assert refused.status_code == 422, refused.text
            error = refused.json()["error"]
            assert error["field"] == "name" and "reserved" in error["message"], error
        assert [u["name"] for u in admin.get("/users").json()] == ["admin"]
        # the CLI's --members all|everyone can never mean a user of that name
        assert _members("everyone") == [] and _members("all") == []
        # an admin's job with user: default is the admin's; one for bob is bob's
        admin.post("/users", json={"name": "bob"}).raise_for_status()
        own = admin.post("/jobs", json={"name": "own", "user": "default", **BODY})
        assert own.status_code == 201 and own.json()["user"] == "admin", own.text
        his = admin.post("/jobs", json={"name": "his", "user": "bob", **BODY})
        assert his.status_code == 201 and his.json()["user"] == "bob", his.text
        admin.post(f"/jobs/{his.json()['id']}/cancel").raise_for_status()
        rerun = admin.post(f"/jobs/{his.json()['id']}/rerun")
        assert rerun.status_code == 201 and rerun.json()["user"] == "bob", rerun.text


UNENCODABLE = [
    "http://h..example/",  # an empty label
    "http://xn--/",  # an A-label with nothing after the prefix
    "http://xn--zz.example/hook",  # an A-label that is not Punycode of anything
    "http://" + "a" * 64 + ".example/",  # a label over 63 characters
    "https://x." + "b" * 64 + ":8443/",
    "http://./",
]


@pytest.mark.parametrize("url", UNENCODABLE)
def test_a_webhook_whose_host_cannot_be_encoded_is_refused(db: Database, url: str) -> None:
    with db.session() as s, pytest.raises(SpecError, match="host") as refused:
        webhooks.create(s, url, "admin", now=T)
    assert refused.value.field == "url"


@pytest.mark.parametrize(
    "url",
    [
        "http://hooks.example/danlu",
        "https://Bücher.example/hook",  # an IDN: encoded as xn--bcher-kva
        "http://xn--bcher-kva.example/",
        "http://hooks.example./",  # a trailing dot (fully qualified)
        "http://my_host.internal:8080/",  # an underscore, as container names have
        "http://127.0.0.1:9/",
        "http://[::1]:9/",
        "http://" + "a" * 63 + ".example/",  # a label of 63 characters, the most
    ],
)
def test_a_webhook_with_an_encodable_host_is_accepted(db: Database, url: str) -> None:
    with db.session() as s:
        assert webhooks.create(s, url, "admin", now=T).url == url


def test_the_api_refuses_a_webhook_whose_host_cannot_be_encoded(
    tmp_path: Path, db_url: str
) -> None:
    with (
        live_server(tmp_path, fake_gpus="1x80GiB", db_url=db_url, start_loops=False) as live,
        live.client() as c,
    ):
        for url in UNENCODABLE[:4]:
            refused = c.post("/webhooks", json={"url": url})
            assert refused.status_code == 422, refused.text
            error = refused.json()["error"]
            assert error["field"] == "url" and "host" in error["message"], error
        assert c.get("/webhooks").json() == []
