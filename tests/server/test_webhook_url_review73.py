"""A webhook URL with a password (``https://user:password@host/...``, an endpoint
behind HTTP basic auth) was shown whole in every reply listing the webhooks. The replies show
it redacted now; the webhook keeps it, and its messages are posted with it."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import live_server
from sqlalchemy import select

from danlu.core.errors import SpecError
from danlu.server.db import Webhook
from danlu.server.services import webhooks

SECRET_URL = "https://bot:s3cr%40t@hooks.example:8443/danlu?team=ml"
SHOWN_URL = "https://bot:***@hooks.example:8443/danlu?team=ml"


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        (SECRET_URL, SHOWN_URL),
        ("http://bot:a:b@c@hooks.example/x", "http://bot:***@hooks.example/x"),
        ("https://:token@hooks.example/", "https://:***@hooks.example/"),
        ("https://bot@hooks.example/", "https://bot@hooks.example/"),  # no password
        ("https://bot:@hooks.example/", "https://bot:@hooks.example/"),  # an empty one
        ("https://hooks.example/a@b", "https://hooks.example/a@b"),  # an @ in the path
    ],
)
def test_a_urls_password_is_redacted(url: str, shown: str) -> None:
    assert webhooks.shown_url(url) == shown
    assert webhooks.hide_password(url, url) == shown  # as the errors quote it
    after = url.partition("//")[2]  # an error quoting only the part after the scheme
    assert webhooks.hide_password(url, repr(after)) == repr(shown.partition("//")[2])


def test_replies_redact_the_password_and_the_messages_still_carry_it(tmp_path: Path) -> None:
    with live_server(tmp_path, start_loops=False) as live, live.client() as admin:
        created = admin.post("/webhooks", json={"url": SECRET_URL})
        assert created.status_code == 201, created.text
        assert created.json()["url"] == SHOWN_URL
        listed = admin.get("/webhooks")
        assert listed.status_code == 200, listed.text
        assert [h["url"] for h in listed.json()] == [SHOWN_URL]
        assert "s3cr" not in created.text + listed.text
        pinged = admin.post(f"/webhooks/{created.json()['id']}/ping")
        assert pinged.status_code == 202, pinged.text
        assert live.prepared is not None
        db = live.prepared.app.state.danlu.db
        with db.read_session() as s:
            assert list(s.scalars(select(Webhook.url))) == [SECRET_URL]
            [message] = webhooks.outgoing(s, [pinged.json()["id"]], 0.0)
        assert message.url == SECRET_URL  # what the sender posts to


@pytest.mark.parametrize(
    "url",
    [
        "ftp://bot:s3cr3t@hooks.example/danlu",  # not http(s)
        "https://bot:s3cr3t@hooks.example:99999/",  # a port out of range
        "https://bot:s3cr3t@hooks.example:0/",  # port 0
        "https://bot:s3cr3t@[::1/",  # urlsplit refuses it
        "https://bot:s3cr3t@[zz]/",  # httpx refuses it
        "https://bot:s3cr3t@hooks..example/",  # a host the sender cannot encode
        "https://bot:s3cr3t@hooks\uff03example/",  # urlsplit's own error quotes the netloc
        "https://bot:s3cr3t/x@hooks.example/",  # an unencoded '/' in the password
        "https://bot:x/s3cr3t@hooks.example/",
        "https://bot:s3cr3t?x@hooks.example/a@b",  # an unencoded '?', an @ in the path
        "https://bot:s3cr3t#x@hooks.example/",
    ],
)
def test_a_refused_urls_password_is_not_in_the_error(tmp_path: Path, url: str) -> None:
    """A webhook URL the API refuses (422) was quoted whole in the error, password and
    all: the error shows it as the replies do, ``bot:***@``; the webhook is not made."""
    assert "s3cr3t" in url
    with live_server(tmp_path, start_loops=False) as live, live.client() as admin:
        refused = admin.post("/webhooks", json={"url": url})
        assert refused.status_code == 422, refused.text
        error = refused.json()["error"]
        assert error["field"] == "url", error
        assert "s3cr3t" not in refused.text, refused.text
        assert "bot:***@" in error["message"], error
        assert admin.get("/webhooks").json() == []


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("https://bot:s3cr3t/x@hooks.example/", "https://bot:***@hooks.example/"),
        ("https://bot:s3?cr#3t@hooks.example/a", "https://bot:***@hooks.example/a"),
        ("https://bot:s3cr3t/x@hooks.example/a@b", "https://bot:***@b"),  # hides too much
        ("https://hooks.example:8443/a@b", "https://hooks.example:8443/a@b"),  # a port
        ("https://[::1]:8443/a@b", "https://[::1]:8443/a@b"),  # an IPv6 host
        ("https://hooks.example/a:b@c", "https://hooks.example/a:b@c"),  # ':' in the path
    ],
)
def test_an_unencoded_slash_question_mark_or_hash_in_a_password_is_hidden_and_refused(
    url: str, shown: str
) -> None:
    """urlsplit ends the authority at the first '/', '?' or '#', so ``bot:s3cr3t/x@host``
    read as host ``bot`` with a port ``s3cr3t``: refused, and the whole URL quoted in the
    error, password and all. The error now says to percent-encode it and hides it."""
    assert webhooks.hide_password(url, url) == shown
    if shown == url:
        return
    with pytest.raises(SpecError, match="must be percent-encoded") as refused:
        webhooks.check_url(url)
    assert "s3" not in str(refused.value) and repr(shown) in str(refused.value)
