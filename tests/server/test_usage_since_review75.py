"""``GET /usage`` with a ``since`` that is not in the past and no ``until``: the period ends
now, so the 422 naming ``since`` says so (it said ``must come before until``, an ``until``
the caller never sent). With an ``until`` the message stays as it was."""

from __future__ import annotations

import time
from pathlib import Path

from helpers import live_server


def test_a_since_to_come_without_until_is_refused_saying_the_period_ends_now(
    tmp_path: Path,
) -> None:
    with live_server(tmp_path, fake_gpus="1x80GiB", start_loops=False) as live, live.client() as c:
        later = time.time() + 3600.0
        refused = c.get("/usage", params={"since": later})
        assert refused.status_code == 422
        error = refused.json()["error"]
        assert error["field"] == "since"
        assert "without until the period ends now" in error["message"]
        assert "before now" in error["message"]
        both = c.get("/usage", params={"since": later, "until": later - 1}).json()["error"]
        assert (both["field"], both["message"]) == ("since", "must come before until")
        # a since to come with a later until is a period, of nothing used yet
        assert c.get("/usage", params={"since": later, "until": later + 60}).json() == []
