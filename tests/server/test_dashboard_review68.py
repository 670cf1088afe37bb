"""The dashboard's review-68 fixes, in a real browser (Debian's ``chromium``, driven by
Playwright) against a real server:

- a metric whose name has repeated, leading or trailing blanks (``"train  loss"``) can be
  picked and drawn, and the metric list is not rebuilt on every refresh (an option's value
  was its text, with the blanks collapsed, so it never matched the record's key);
- the Projects table's GPUs held is asked for on every refresh, not only with the week of
  usage (every 15th refresh): a cancelled job's GPU is seen freed within a refresh or two;
- a token the API refuses with a 403 on ``/users/me`` (a job run's ``DANLU_TOKEN``) is shown
  and forgotten like a 401, not retried every 2 s forever; a network error is still retried.

Without ``/usr/bin/chromium`` these tests are skipped, unless ``DANLU_TEST_REQUIRE_BROWSER``
is set (the server and browser fixtures of ``test_dashboard``)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import test_dashboard
from helpers import Live, spec, wait_for, wait_state

# Before sign-in: window.started counts the refreshes begun (each asks for the nodes once;
# the timer begins one only when the one before has ended), window.asked the requests by
# API path, and window.retries the timers the page set for 2 s (start()'s retry).
_COUNT = """() => {
  window.started = 0;
  window.asked = {};
  window.retries = 0;
  const later = window.setTimeout;
  window.setTimeout = (callback, ms, ...rest) => {
    if (ms === 2000) window.retries += 1;
    return later(callback, ms, ...rest);
  };
  const fetch = window.fetch;
  window.fetch = (url, init) => {
    const path = new URL(String(url), location.href).pathname;
    if (path === "/api/v1/cluster/nodes") window.started += 1;
    window.asked[path] = (window.asked[path] || 0) + 1;
    return fetch(url, init);
  };
}"""

# the refreshes begun reach n: every one begun before the (n-1)-th has ended
_BEGUN = "(n) => window.started >= n"


live = test_dashboard.live
browser = test_dashboard.browser


@pytest.fixture
def page(live: Live, browser: Any) -> Iterator[Any]:
    """A new tab on the dashboard, counting its refreshes and requests (``_COUNT``)."""
    context = browser.new_context()  # its own session storage
    try:
        tab = context.new_page()
        errors: list[str] = []
        tab.on("pageerror", lambda exc: errors.append(str(exc)))
        tab.on(
            "response",
            lambda r: errors.append(f"{r.status} {r.url}") if r.status == 404 else None,
        )
        tab.goto(f"{live.url}/")
        tab.evaluate(_COUNT)
        yield tab
        assert errors == []  # no script error on the page, nothing it asked for missing
    finally:
        context.close()


def _sign_in(page: Any, token: str) -> None:
    from playwright.sync_api import expect

    page.fill("#token", token)
    page.click("#login button")
    expect(page.locator("#who")).to_have_text("admin (admin)")


def _range(page: Any) -> str:
    text: str = page.locator("#metric-range").text_content()
    return text


_BLANKS = ["train  loss", " lead", "trail "]  # repeated, leading, trailing
_LAST = {"train  loss": "2.000", " lead": "12.00", "trail ": "22.00"}  # each one's at step 2


def test_a_metric_named_with_blanks_is_drawn_and_its_list_kept(live: Live, page: Any) -> None:
    from playwright.sync_api import expect

    with live.client() as c:
        job = c.post("/jobs", json=spec("blanks", "import time; time.sleep(60)")).json()
        wait_state(c, job["id"], "RUNNING")
        values = [{k: float(n * 10 + i) for n, k in enumerate(_BLANKS)} for i in (1, 2)]
        steps = [{"step": i, **v} for i, v in zip((1, 2), values, strict=True)]
        c.post(f"/jobs/{job['id']}/metrics", json={"metrics": steps}).raise_for_status()
    _sign_in(page, live.token)
    page.locator(f'#jobs tr[data-job="{job["id"]}"] button[data-action="show"]').click()
    expect(page.locator("#metric-key option")).to_have_count(3)
    listed = page.eval_on_selector_all("#metric-key option", "os => os.map((o) => o.value)")
    assert listed == _BLANKS  # each the exact key, not its text with the blanks collapsed
    assert page.eval_on_selector("#metric-key", "s => s.value") == "train  loss"  # the first
    assert _range(page).startswith("train  loss 2.000 at step 2 (")
    for key in _BLANKS:
        page.select_option("#metric-key", value=key)
        assert _range(page).startswith(f"{key} {_LAST[key]} at step 2 (")  # drawn on the change
        expect(page.locator("#metric-chart polyline")).to_have_count(1)
    page.evaluate("window.kept = Array.from(document.querySelectorAll('#metric-key option'))")
    begun = page.evaluate("window.started")
    page.wait_for_function(_BEGUN, arg=begun + 3)  # two whole refreshes of the open panel
    same = "window.kept.every((o, i) => o === document.querySelectorAll('#metric-key option')[i])"
    assert page.evaluate(same)  # the list was not rebuilt: an open one stays open
    assert page.eval_on_selector("#metric-key", "s => s.value") == "trail "  # still chosen
    assert _range(page).startswith("trail  22.00 at step 2 (")
    with live.client() as c:
        c.post(f"/jobs/{job['id']}/cancel").raise_for_status()


def test_the_projects_gpus_held_follow_every_refresh(live: Live, page: Any) -> None:
    from playwright.sync_api import expect

    with live.client() as c:
        job = c.post("/jobs", json=spec("held", "import time; time.sleep(60)")).json()
        wait_state(c, job["id"], "RUNNING")
    _sign_in(page, live.token)
    held = page.locator('#projects tr[data-project="default"] td').nth(4)
    expect(held).to_have_text("1.00")
    with live.client() as c:
        c.post(f"/jobs/{job['id']}/cancel").raise_for_status()
        wait_state(c, job["id"], "CANCELLED")
        now = {p["name"]: p.get("gpus_held") for p in c.get("/projects").json()}["default"]
    begun = page.evaluate("window.started")
    page.wait_for_function(_BEGUN, arg=begun + 2)  # one whole refresh begun after the cancel
    assert held.text_content() == ("-" if now is None else f"{now:.2f}")
    asked = page.evaluate("window.asked")
    assert asked["/api/v1/projects"] == asked["/api/v1/cluster/nodes"]  # every refresh
    assert asked["/api/v1/usage"] < asked["/api/v1/cluster/nodes"]  # a week: not every 2 s


_PRINT_TOKEN = (
    "import os, time; print('TOKEN=' + os.environ['DANLU_TOKEN'], flush=True); time.sleep(60)"
)


def test_a_job_run_s_token_is_refused_once_and_forgotten(live: Live, page: Any) -> None:
    from playwright.sync_api import expect

    with live.client() as c:
        job = c.post("/jobs", json=spec("run", _PRINT_TOKEN)).json()
        log = wait_for(lambda: "TOKEN=" in (t := c.get(f"/jobs/{job['id']}/logs").text) and t)
    run_token = log.split("TOKEN=")[1].split()[0]
    with live.client(run_token) as run:  # the API's answer the page is given
        assert run.get("/users/me").status_code == 403
    page.fill("#token", run_token)
    page.click("#login button")
    expect(page.locator("#status")).to_contain_text(
        f"this token was issued to a run of job {job['id']}"
    )
    expect(page.locator("#status")).to_have_class("error")
    expect(page.locator("#login")).to_be_visible()  # asked again, as after a 401
    expect(page.locator("#logout")).to_be_hidden()
    assert page.evaluate("sessionStorage.getItem('danlu-token')") is None  # forgotten
    assert page.evaluate("window.retries") == 0  # no retry was set
    assert page.evaluate("window.asked['/api/v1/users/me']") == 1
    _sign_in(page, live.token)  # a user's token then signs in
    with live.client() as c:
        c.post(f"/jobs/{job['id']}/cancel").raise_for_status()


def test_a_network_error_signing_in_is_retried(live: Live, page: Any) -> None:
    from playwright.sync_api import expect

    page.route("**/api/v1/users/me", lambda route: route.abort("connectionrefused"))
    page.fill("#token", live.token)
    page.click("#login button")
    expect(page.locator("#status")).to_contain_text("retrying")
    assert page.evaluate("sessionStorage.getItem('danlu-token')") == live.token  # kept
    expect(page.locator("#logout")).to_be_visible()  # Sign out still works meanwhile
    page.unroute("**/api/v1/users/me")
    expect(page.locator("#who")).to_have_text("admin (admin)", timeout=15_000)  # by a retry
    assert page.evaluate("window.retries") >= 1
