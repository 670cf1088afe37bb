"""The dashboard as its users see it, in a real browser (the server and browser fixtures of
``test_dashboard``):

- a user who is not an admin sees, on each GPU, how many of the other users' jobs hold it
  (the API's ``other_jobs``): a GPU held by another user's job said ``-``, as a free one does,
  beside a memory bar that read full;
- a long job name and a narrow window (a phone's) keep the page within the window: each wide
  table scrolls in its own section and a long name breaks, where the page grew past the
  window's right edge and the buttons at the rows' ends went out of sight;
- an action that fails while the server cannot be reached stays said beside "cannot
  refresh": the next refresh's error wiped it within 2 s, so the action seemed to fail
  silently, and the tables, as the last refresh found them, are greyed until one renders
  again (they read as current to a reader far below the status line), and the server's
  version is read again once it answers (it kept the version of before a restart);
- the ages shown are the server's, whatever the clock of the machine the browser runs on
  says: a job submitted a few seconds ago read "60m" old in a browser whose clock was an hour
  ahead (and "0s", every one of them, in one an hour behind).

Without ``/usr/bin/chromium`` these tests are skipped, unless ``DANLU_TEST_REQUIRE_BROWSER``
is set."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
import test_dashboard
from helpers import Live, spec, wait_state

live = test_dashboard.live
browser = test_dashboard.browser

_SLEEP = "import time; time.sleep(60)"
# Before the page's own script: this machine's clock an hour ahead of the server's (Date.now()
# and new Date() say so; a Date of a given moment stays that moment)
_CLOCK_AN_HOUR_AHEAD = """
(() => {
  const Real = Date;
  const skew = 3600 * 1000;
  class Skewed extends Real {
    constructor(...given) {
      if (given.length === 0) super(Real.now() + skew);
      else super(...given);
    }
    static now() { return Real.now() + skew; }
  }
  globalThis.Date = Skewed;
})();
"""
# the page scrolls sideways: its content is wider than the window
_PAGE_TOO_WIDE = "document.documentElement.scrollWidth > document.documentElement.clientWidth"


@pytest.fixture
def page(live: Live, browser: Any) -> Iterator[Any]:
    """A new tab on the dashboard; no error of its script goes unseen; dialogs accepted."""
    context = browser.new_context()
    try:
        tab = context.new_page()
        errors: list[str] = []
        tab.on("pageerror", lambda exc: errors.append(str(exc)))
        tab.on("dialog", lambda dialog: dialog.accept())
        tab.goto(f"{live.url}/")
        yield tab
        assert errors == []
    finally:
        context.close()


def test_a_user_sees_how_many_jobs_of_other_users_hold_a_gpu(live: Live, page: Any) -> None:
    from playwright.sync_api import expect

    with live.client() as c:
        c.post("/users", json={"name": "dora"}).raise_for_status()
        token = c.post("/users/dora/tokens", json={"name": "web"}).json()["token"]
        theirs = c.post("/jobs", json=spec("admins", _SLEEP)).json()
        theirs = wait_state(c, theirs["id"], "RUNNING")
    with live.client(token) as dora:
        mine = dora.post("/jobs", json=spec("doras", _SLEEP)).json()
        mine = wait_state(dora, mine["id"], "RUNNING")
    their_gpu = theirs["allocation"][0]["gpu"]
    my_gpu = mine["allocation"][0]["gpu"]
    page.fill("#token", token)
    page.click("#login button")
    expect(page.locator("#who")).to_have_text("dora (user)")

    def jobs_of(gpu: int) -> Any:
        """The cell of the Cluster table that says which jobs hold the GPU."""
        return page.locator(f'#nodes tr[data-gpu="{gpu}"] td').nth(6)

    expect(jobs_of(my_gpu)).to_have_text(mine["id"])
    expect(jobs_of(their_gpu)).to_have_text("1 job of another user")  # not its id
    with live.client() as c:
        for job in (theirs, mine):
            c.post(f"/jobs/{job['id']}/cancel").raise_for_status()


def test_a_long_name_and_a_narrow_window_keep_the_page_within_the_window(
    live: Live, page: Any
) -> None:
    from playwright.sync_api import expect

    long_name = "a" * 63  # the longest a name may be, with nothing to break it at
    with live.client() as c:
        job = c.post("/jobs", json=spec(long_name, _SLEEP)).json()
        wait_state(c, job["id"], "RUNNING")
    page.set_viewport_size({"width": 1280, "height": 800})
    page.fill("#token", live.token)
    page.click("#login button")
    row = page.locator(f'#jobs tr[data-job="{job["id"]}"]')
    name = row.locator("td").nth(1)
    expect(name).to_have_text(long_name)
    expect(page.locator("#feed td", has_text=long_name).first).to_be_visible()
    assert page.evaluate(_PAGE_TOO_WIDE) is False
    cancel = row.locator('button[data-action="cancel"]').bounding_box()
    assert cancel is not None and cancel["x"] + cancel["width"] <= 1280  # in sight
    page.set_viewport_size({"width": 390, "height": 800})  # a phone's
    expect(name).to_have_text(long_name)
    assert page.evaluate(_PAGE_TOO_WIDE) is False
    # the Jobs table scrolls in its section, its buttons reached there
    jobs = page.locator("section", has=page.locator("#jobs"))
    assert jobs.evaluate("(section) => section.scrollWidth > section.clientWidth")
    row.locator('button[data-action="cancel"]').click()
    with live.client() as c:
        assert wait_state(c, job["id"], "CANCELLED")["state"] == "CANCELLED"


def test_an_action_that_fails_in_an_outage_stays_said(live: Live, page: Any) -> None:
    from playwright.sync_api import Route, expect

    with live.client() as c:
        job = c.post("/jobs", json=spec("busy", _SLEEP)).json()
        wait_state(c, job["id"], "RUNNING")
    page.fill("#token", live.token)
    page.click("#login button")
    hold = page.locator(f'#jobs tr[data-job="{job["id"]}"] button[data-action="hold"]')
    expect(hold).to_be_visible()

    def unreachable(route: Route) -> None:
        route.abort("connectionrefused")

    page.route("**/api/v1/**", unreachable)  # the server went away
    hold.click()
    status = page.locator("#status")
    expect(status).to_contain_text("cannot refresh: no connection to the server")
    expect(status).to_contain_text(f"hold {job['id']}: no connection to the server")
    main = page.locator("#main")  # what it shows is not current: greyed
    expect(main).to_have_class(re.compile(r"\bstale\b"))
    assert float(main.evaluate("(node) => getComputedStyle(node).opacity")) < 1
    expect(page.locator("#version")).to_have_text(re.compile(r"^v\d"))  # as the page loaded

    def upgraded(route: Route) -> None:
        route.fulfill(json={"status": "ok", "version": "99.0.0"})

    page.route("**/api/v1/health", upgraded)  # the server comes back upgraded
    page.unroute("**/api/v1/**", unreachable)  # back: the failure is kept until the next action
    expect(page.locator("#version")).to_have_text("v99.0.0")
    expect(status).to_contain_text("updated ")
    expect(status).to_contain_text(f"hold {job['id']}: no connection to the server")
    expect(main).not_to_have_class(re.compile(r"\bstale\b"))
    with live.client() as c:
        assert c.get(f"/jobs/{job['id']}").json()["held_at"] is None  # it never reached it
        c.post(f"/jobs/{job['id']}/cancel").raise_for_status()


def test_ages_are_the_server_s_whatever_this_machine_s_clock_says(live: Live, browser: Any) -> None:
    from playwright.sync_api import expect

    with live.client() as c:
        job = c.post("/jobs", json=spec("fresh", _SLEEP)).json()
    context = browser.new_context()
    try:
        context.add_init_script(_CLOCK_AN_HOUR_AHEAD)
        tab = context.new_page()
        errors: list[str] = []
        tab.on("pageerror", lambda exc: errors.append(str(exc)))
        tab.goto(f"{live.url}/")
        assert tab.evaluate("Date.now() - performance.timeOrigin") > 3_000_000  # an hour off
        tab.fill("#token", live.token)
        tab.click("#login button")
        age = tab.locator(f'#jobs tr[data-job="{job["id"]}"] td').nth(7)
        expect(age).to_have_text(re.compile(r"^\d+s$"))  # seconds, not "60m"
        assert int(age.text_content().removesuffix("s")) < 120
        assert errors == []
    finally:
        context.close()
    with live.client() as c:
        c.post(f"/jobs/{job['id']}/cancel").raise_for_status()
