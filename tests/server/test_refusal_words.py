"""The words of some refusals: a webhook's port out of range says the range a port may take
whatever the number (0 and 99999 alike); a non-admin refused another user's tokens or
listing reads "the tokens of 'bob'", never the doubled quote of ``'bob''s``, and names the
CLI command and the route for the caller's own; a token is revoked by its prefix as the
token starts too (``dl_PREFIX``); a job refused at submission over a quota by itself says
so, not "0 in use" of a user holding GPUs; a project's ``share`` given under a policy that
does not read it is kept, with a note saying so."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from helpers import live_server, record_round, user_and_nodes

from danlu.core.cluster import Node, gpu_type
from danlu.core.errors import SpecError
from danlu.core.units import GiB
from danlu.sched.registry import make_policy
from danlu.server.db import Database
from danlu.server.errors import AdmissionError, NotFoundError
from danlu.server.services import jobs, projects, users, webhooks

T = 1_000_000.0
BODY = {"command": ["python", "train.py"]}
RANGE = "the port must be between 1 and 65535"


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:99999/x",
        "http://127.0.0.1:0/x",
        "http://[::1]:65536/",
        "http://bot:secret@hooks.example:70000/",
    ],
)
def test_a_port_out_of_range_says_the_range(url: str) -> None:
    with pytest.raises(SpecError) as refused:
        webhooks.check_url(url)
    assert refused.value.field == "url"
    assert refused.value.message.endswith(f": {RANGE}"), refused.value.message
    assert "secret" not in refused.value.message


def test_a_port_that_is_no_number_is_still_no_url() -> None:
    with pytest.raises(SpecError, match="is not a URL: Port could not be cast"):
        webhooks.check_url("http://hooks.example:abc/")
    assert webhooks.check_url("http://[::1]:65535/") == "http://[::1]:65535/"


def _error(response: httpx.Response, status: int) -> str:
    assert response.status_code == status, response.text[:300]
    message: str = response.json()["error"]["message"]
    return message


def test_another_users_tokens_and_listings_are_refused_without_a_doubled_quote(
    tmp_path: Path,
) -> None:
    with live_server(tmp_path, start_loops=False) as live, live.client() as admin:
        for name in ("alice", "bob"):
            assert admin.post("/users", json={"name": name}).status_code == 201
        token = admin.post("/users/alice/tokens", json={"name": "t"}).json()["token"]
        with live.client(token) as alice:
            tokens = _error(alice.get("/users/bob/tokens"), 403)
            assert tokens == (
                "only 'bob' or an admin may see or change the tokens of 'bob'; 'alice' is "
                "neither: danlu user tokens alice, GET /users/alice/tokens, lists your own"
            )
            listing = _error(alice.get("/jobs", params={"user": "bob"}), 403)
            assert "may list only their own jobs, not those of 'bob' (" in listing
            events = _error(alice.get("/events", params={"user": "bob"}), 403)
            assert "their own jobs' events, not those of 'bob' (" in events
            for message in (tokens, listing, events):
                assert "''" not in message


OWN_WAYS = [
    (
        "GET",
        "/users/bob",
        "see the record",
        "danlu user show alice, GET /users/alice, shows your own",
    ),
    (
        "GET",
        "/users/bob/events",
        "see the events",
        "danlu user show alice, GET /users/alice/events, lists your own",
    ),
    (
        "POST",
        "/users/bob/tokens",
        "see or change the tokens",
        "danlu user token alice, POST /users/alice/tokens, issues one of your own",
    ),
    (
        "DELETE",
        "/users/bob/tokens",
        "see or change the tokens",
        "danlu user revoke alice, DELETE /users/alice/tokens, revokes your own",
    ),
    (
        "DELETE",
        "/users/bob/tokens/abcd1234",
        "see or change the tokens",
        "danlu user revoke alice PREFIX, DELETE /users/alice/tokens/PREFIX, revokes one of "
        "your own",
    ),
]


def test_a_refusal_of_another_users_account_names_the_command_and_route_for_ones_own(
    tmp_path: Path,
) -> None:
    """The CLI prints the message as it is: a bare REST path read wrong there, so each
    refusal names both the CLI command and the route that do it for the caller's own."""
    with live_server(tmp_path, start_loops=False) as live, live.client() as admin:
        for name in ("alice", "bob"):
            assert admin.post("/users", json={"name": name}).status_code == 201
        token = admin.post("/users/alice/tokens", json={"name": "t"}).json()["token"]
        with live.client(token) as alice:
            for method, path, doing, own in OWN_WAYS:
                body = {"name": "t"} if method == "POST" else None
                refused = alice.request(method, path, json=body)
                assert refused.status_code == 403, (path, refused.text[:300])
                assert refused.json()["error"]["message"] == (
                    f"only 'bob' or an admin may {doing} of 'bob'; 'alice' is neither: {own}"
                ), path
        assert admin.get("/users/bob/tokens").json() == []  # none issued to bob meanwhile


@pytest.mark.parametrize("written", ["{p}", "dl_{p}", "dl_{p}_"])
def test_a_token_is_revoked_by_its_prefix_as_the_token_starts_too(
    db: Database, written: str
) -> None:
    with db.session() as s:
        alice = users.create_user(s, "alice", now=T)
        kept = users.issue_token(s, alice, "kept", now=T)
        token = users.issue_token(s, alice, "t", now=T)
        prefix = token.split("_")[1]
        assert token.startswith(f"dl_{prefix}_")
        assert users.revoke_tokens(s, alice, now=T, prefix=written.format(p=prefix)) == 1
        assert users.find_token(s, token) is None
        assert users.find_token(s, kept) is not None
        with pytest.raises(NotFoundError, match="token 'dl_ffffffff' not found"):
            users.revoke_tokens(s, alice, now=T, prefix="dl_ffffffff")


def test_the_route_revokes_a_token_by_its_dl_prefix(tmp_path: Path) -> None:
    with live_server(tmp_path, start_loops=False) as live, live.client() as admin:
        assert admin.post("/users", json={"name": "alice"}).status_code == 201
        token = admin.post("/users/alice/tokens", json={"name": "t"}).json()["token"]
        start = token[: len("dl_") + 8]
        revoked = admin.delete(f"/users/alice/tokens/{start}")
        assert revoked.status_code == 200, revoked.text[:300]
        assert revoked.json() == {"revoked": 1}
        assert admin.get("/users/alice/tokens").json() == []


def test_a_job_over_a_quota_by_itself_is_refused_in_true_words(db: Database) -> None:
    """The user holds 1 GPU of a quota of 1: the refusal of a 2-GPU job said "0 in use"."""
    with db.session() as s:
        alice = user_and_nodes(s, (Node("a", 4, gpu_type("H100")),), T)
        users.set_quota(s, "alice", 1)
        held = jobs.submit(s, {"name": "one", "resources": {"gpus": 1}, **BODY}, alice, now=T).id
    assert {j.id for j in record_round(db, make_policy("fifo"), T + 10).started} == {held}
    with db.session() as s:
        alice = users.get_user(s, "alice")
        two = {"name": "two", "resources": {"gpus": 2}, **BODY}
        with pytest.raises(AdmissionError) as refused:
            jobs.submit(s, two, alice, now=T + 20)
        assert refused.value.field == "resources.gpus"
        assert refused.value.message == (
            "can never start: user 'alice' GPU quota: 2 asked > 1, by this job alone"
        )
        projects.create_project(s, "vision", quota_gpu_memory=40 * GiB, now=T)
        big = {"name": "big", "project": "vision", "resources": {"gpus": 1}, **BODY}
        with pytest.raises(AdmissionError) as refused:
            jobs.submit(s, big, alice, now=T + 20)
        assert refused.value.field == "resources.gpu_memory"
        assert refused.value.message == (
            f"can never start: project 'vision' GPU memory quota: {80 * GiB} bytes asked > "
            f"{40 * GiB}, by this job alone"
        )


@pytest.mark.parametrize("policy", ["priority", "fair-share"])
def test_a_share_given_under_a_policy_that_does_not_read_it_is_noted(
    tmp_path: Path, policy: str
) -> None:
    with live_server(tmp_path, start_loops=False, policy=policy) as live, live.client() as admin:
        added = admin.post("/projects", json={"name": "research", "share": 2})
        assert added.status_code == 201, added.text[:300]
        assert added.json()["share"] == 2
        changed = admin.put("/projects/research", json={"share": 3})
        assert changed.status_code == 200, changed.text[:300]
        assert changed.json()["share"] == 3
        if policy == "fair-share":
            assert added.json()["notes"] == changed.json()["notes"] == []
        else:
            assert added.json()["notes"] == [
                "share 2 is kept, but only the fair-share policy weighs projects by it; this "
                "control plane schedules with 'priority' (DANLU_POLICY), which does not"
            ]
            assert changed.json()["notes"][0].startswith("share 3 is kept, but only the")
        # the default weight, or no weight given: nothing to note
        plain = admin.post("/projects", json={"name": "plain", "share": 1})
        assert plain.status_code == 201 and plain.json()["notes"] == []
        priority = admin.put("/projects/research", json={"priority": 5})
        assert priority.status_code == 200 and priority.json()["notes"] == []
        listed = admin.get("/projects").json()
        assert [p["notes"] for p in listed] == [[], []]
