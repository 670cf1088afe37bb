"""The dashboard's sizes and ages, a refused action and a token revoked mid-session, in a
real browser (the server and browser fixtures of ``test_dashboard``):

- a size is shown by the rule of :func:`danlu.core.units.format_bytes`, the server's and the
  cli's: the page wrote every size with one decimal (``1280GiB`` as ``1.2TiB``, which
  ``danlu`` shows as ``1.25TiB``), so the page and the cli said two sizes for one;
- an action refused because its job changed meanwhile (cancelled from the cli between the
  page's refresh and the click) says why and shows the job as it is now: the page kept the
  job's stale row, RUNNING with its Hold and Cancel buttons, until the next refresh;
- a plain user sees her own jobs only, and the server refuses an action on another user's
  job sent anyway; a token revoked while signed in signs the page out, saying so, once; the
  token is never in a URL nor in localStorage;
- an age is in the unit of its number as shown: 119.7 s read "120s", 47.99 h "48.0h"; a
  moment ahead of the server's clock is "0s".

Without ``/usr/bin/chromium`` these tests are skipped, unless ``DANLU_TEST_REQUIRE_BROWSER``
is set."""

from __future__ import annotations

import random
from typing import Any

import test_dashboard
import test_dashboard_views
from helpers import Live, spec, wait_state

from danlu.core.units import MAX_BYTES, GiB, MiB, format_bytes

live = test_dashboard.live
browser = test_dashboard.browser
page = test_dashboard_views.page  # a new tab; no script error unseen; dialogs accepted

_SLEEP = "import time; time.sleep(60)"
_TiB = 1024**4


def _sizes() -> list[int | float]:
    """Sizes of every kind format_bytes tells apart: bytes, exact ones of one to three
    decimals, measurements of three significant digits, the edges of each unit, negatives
    and past any machine; and a few thousand drawn at random (a fixed seed)."""
    chosen: list[int | float] = [
        0, 1, 1023, 1024, 1025, 1536, 1048575, MiB, 80 * GiB, 1280 * GiB, 1152 * GiB,
        1023.99 * 1024, 79.2 * GiB, 1.04 * GiB, 123.4 * GiB, int(0.3 * GiB), 10 * GiB - 1,
        9.995 * GiB, 12.25 * GiB, 1.125 * _TiB, 1023.9996 * _TiB, 1024 * _TiB, MAX_BYTES,
        MAX_BYTES * 2.0, 5e6 * _TiB, 1e308, -5.7, -80 * GiB, -1280 * GiB,
    ]  # fmt: skip
    draw = random.Random(97)
    chosen += [draw.randint(0, 2**50) for _ in range(1000)]
    chosen += [draw.random() * 2**45 for _ in range(1000)]
    chosen += [draw.randint(1, 4000) * MiB * draw.choice([1, 64, 1000]) for _ in range(1000)]
    return chosen


def test_sizes_are_shown_by_the_rule_of_the_server_and_the_cli(live: Live, page: Any) -> None:
    from playwright.sync_api import expect

    sizes = _sizes()
    shown = page.evaluate("(sizes) => sizes.map(bytes)", sizes)
    wrong = [(size, said, format_bytes(size)) for size, said in zip(sizes, shown, strict=True)]
    assert [case for case in wrong if case[1] != case[2]] == []
    with live.client() as c:
        c.post("/projects", json={"name": "big", "quota_gpu_memory": 1280 * GiB})
    page.fill("#token", live.token)
    page.click("#login button")
    quota = page.locator('#projects tr[data-project="big"] td').nth(2)
    expect(quota).to_have_text("1.25TiB")  # as danlu shows it; the page said 1.2TiB
    used = page.locator("#nodes tbody tr").first.locator("td").nth(4)
    expect(used).to_contain_text("/ 80.0GiB")


def _stop_refreshing(page: Any) -> None:
    """No refresh of the page's timer from now on, and none in flight: what it shows changes
    only by what the test does on it."""
    page.evaluate("clearInterval(timer); timer = null")
    page.wait_for_function("refreshing === 0")


def test_an_action_on_a_job_cancelled_meanwhile_says_why_and_shows_it_as_it_is(
    live: Live, page: Any
) -> None:
    from playwright.sync_api import expect

    with live.client() as c:
        job = c.post("/jobs", json=spec("sleeper", _SLEEP)).json()
        wait_state(c, job["id"], "RUNNING")
    page.fill("#token", live.token)
    page.click("#login button")
    row = page.locator(f'#jobs tr[data-job="{job["id"]}"]')
    expect(row.locator("td.state")).to_have_text("RUNNING")
    row.locator('button[data-action="show"]').click()
    expect(page.locator("#detail-why")).to_contain_text("RUNNING")
    _stop_refreshing(page)
    with live.client() as c:  # the cli's cancel, between the page's refresh and the click
        c.post(f"/jobs/{job['id']}/cancel").raise_for_status()
        wait_state(c, job["id"], "CANCELLED")
    row.locator('button[data-action="hold"]').click()
    expect(page.locator("#status")).to_contain_text(
        f"hold {job['id']}: job {job['id']} is CANCELLED: a finished job cannot be held"
    )
    expect(row).to_have_count(0)  # not the stale RUNNING row: ended, it left the unfinished
    expect(page.locator("#detail-why")).to_contain_text("CANCELLED")
    expect(page.locator("#detail-actions button")).to_have_text(["Rerun"])
    expect(page.locator("#status")).to_contain_text("a finished job cannot be held")  # kept


def test_a_plain_user_acts_on_their_own_jobs_only_and_a_revoked_token_signs_out(
    live: Live, page: Any
) -> None:
    from playwright.sync_api import expect

    with live.client() as c:
        c.post("/users", json={"name": "dora"}).raise_for_status()
        dora = c.post("/users/dora/tokens", json={}).json()["token"]
        admins = c.post("/jobs", json=spec("admins", _SLEEP)).json()
        doras = c.post("/jobs", json={**spec("doras", _SLEEP), "user": "dora"}).json()
        wait_state(c, admins["id"], "RUNNING")
    asked: list[str] = []
    page.on("request", lambda request: asked.append(request.url))
    page.fill("#token", dora)
    page.click("#login button")
    expect(page.locator("#who")).to_have_text("dora (user)")
    assert page.evaluate("localStorage.length") == 0  # the tab's sessionStorage only (docs)
    mine = page.locator(f'#jobs tr[data-job="{doras["id"]}"]')
    expect(mine.locator('button[data-action="cancel"]')).to_have_count(1)
    expect(page.locator("#jobs tbody tr")).to_have_count(1)  # the API lists her own only
    # sent anyway (a button kept from another page, a crafted call): the server refuses
    page.evaluate("(id) => act({ id, name: 'admins' }, 'cancel')", admins["id"])
    expect(page.locator("#status")).to_contain_text(
        f"cancel {admins['id']}: job {admins['id']} belongs to another user"
    )
    with live.client() as c:
        assert c.get(f"/jobs/{admins['id']}").json()["state"] == "RUNNING"
        c.delete("/users/dora/tokens").raise_for_status()  # revoked while she is signed in
    expect(page.locator("#login")).to_be_visible()
    expect(page.locator("#status")).to_have_text(
        "token refused: the API token is unknown or revoked; ask an admin for a new one"
    )
    expect(page.locator("#main")).to_be_hidden()
    assert page.evaluate("sessionStorage.getItem('danlu-token')") is None
    assert page.evaluate("timer") is None  # no refresh asks again with the revoked token
    assert asked and not [url for url in asked if dora in url]  # never in a URL


def test_ages_go_from_seconds_to_days_and_a_moment_ahead_is_no_negative_age(page: Any) -> None:
    # seconds before the server's now; a negative one is ahead of it (its clock stepped back)
    # the unit is the number's as shown: 119.7 s rounds to 2 minutes, not "120s" (nor 7170 s
    # "120m", 47.99 h "48.0h")
    before = [-3.0, 0.0, 59.0, 119.7, 300.0, 5400.0, 7170.0, 36 * 3600.0, 47.99 * 3600]
    before += [3 * 86400.0 + 100, 40 * 86400.0]
    shown = page.evaluate(
        "(before) => { const now = serverNow(); return before.map((s) => age(now - s)); }", before
    )
    assert shown == ["0s", "0s", "59s", "2m", "5m", "90m", "2.0h", "36.0h", "2d", "3d", "40d"]
