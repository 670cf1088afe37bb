"""The dashboard's review-70 fixes, in a real browser (the server and browser fixtures of
``test_dashboard``):

- signing out empties every table, note and the job panel, and the next user's page is shown
  only once their own first refresh has rendered; a failed refresh asks for the usage again;
- signing out while the first refresh is in flight starts no timer (no polls with no token,
  no "token refused" for a user who simply signed out);
- Cancel (a job, a sweep), Drain, Cordon and Close GPU ask first, naming what they act on
  (a drain: how many jobs it preempts); a node already closed keeps its reason, a new close
  takes the one given in the prompt (by default "from the dashboard by <user>");
- the open job's events are its newest (``tail=true``), the panel is scrolled into view, and a
  metric chart holding the newest 500 records says so.

Without ``/usr/bin/chromium`` these tests are skipped, unless ``DANLU_TEST_REQUIRE_BROWSER``
is set."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import test_dashboard
from helpers import Live, spec, wait_state

live = test_dashboard.live
browser = test_dashboard.browser

# Before sign-in: window.asked counts the requests by API path, window.timers the timers
# set by setInterval, window.bearers the Authorization headers sent; once armed, the next
# answer to /cluster/nodes is held until window.release() (window.heldParsed is set when
# the page has read it: the refresh that asked for it then ends in the same task).
_WATCH = """() => {
  window.asked = {};
  window.timers = 0;
  window.bearers = [];
  const every = window.setInterval;
  window.setInterval = (...args) => { window.timers += 1; return every(...args); };
  let armed = false;
  window.arm = () => { armed = true; };
  const fetch = window.fetch;
  window.fetch = async (url, init) => {
    const path = new URL(String(url), location.href).pathname;
    window.asked[path] = (window.asked[path] || 0) + 1;
    if (init && init.headers) window.bearers.push(init.headers.Authorization);
    const response = await fetch(url, init);
    if (armed && path === "/api/v1/cluster/nodes") {
      armed = false;
      await new Promise((go) => { window.release = go; });
      const json = response.json.bind(response);
      response.json = async () => {
        const body = await json();
        window.heldParsed = true;
        return body;
      };
    }
    return response;
  };
}"""


@pytest.fixture
def page(live: Live, browser: Any) -> Iterator[Any]:
    """A new tab on the dashboard, watched (``_WATCH``); its dialogs are answered from
    ``tab.answers`` in turn (True: accept, False: dismiss, a string: typed into a prompt)
    and recorded in ``tab.dialogs`` as (type, message, default value)."""
    context = browser.new_context()  # its own session storage
    try:
        tab = context.new_page()
        errors: list[str] = []
        tab.on("pageerror", lambda exc: errors.append(str(exc)))
        tab.on(
            "response",
            lambda r: errors.append(f"{r.status} {r.url}") if r.status == 404 else None,
        )
        tab.answers = []
        tab.dialogs = []

        def answer(dialog: Any) -> None:
            tab.dialogs.append((dialog.type, dialog.message, dialog.default_value))
            given = tab.answers.pop(0) if tab.answers else False
            if given is False:
                dialog.dismiss()
            elif given is True:
                dialog.accept()
            else:
                dialog.accept(given)

        tab.on("dialog", answer)
        tab.goto(f"{live.url}/")
        tab.evaluate(_WATCH)
        yield tab
        assert errors == []  # no script error on the page, nothing it asked for missing
    finally:
        context.close()


def _sign_in(page: Any, token: str, who: str) -> None:
    from playwright.sync_api import expect

    page.fill("#token", token)
    page.click("#login button")
    expect(page.locator("#who")).to_have_text(who)


def test_the_next_user_never_sees_the_one_who_signed_out(live: Live, page: Any) -> None:
    from playwright.sync_api import expect

    with live.client() as c:
        c.post("/users", json={"name": "dora"}).raise_for_status()
        token = c.post("/users/dora/tokens", json={"name": "web"}).json()["token"]
        theirs = c.post("/jobs", json=spec("admins", "import time; time.sleep(60)")).json()
        wait_state(c, theirs["id"], "RUNNING")
    _sign_in(page, live.token, "admin (admin)")
    row = page.locator(f'#jobs tr[data-job="{theirs["id"]}"]')
    row.locator('button[data-action="show"]').click()
    expect(page.locator("#detail-title")).to_have_text(f"admins ({theirs['id']})")
    expect(page.locator('#nodes button[data-action="drain"]')).to_have_count(1)
    page.click("#logout")
    expect(page.locator("#main")).to_be_hidden()
    assert page.locator("#main tbody tr").count() == 0  # every table emptied
    for emptied in ("#summary", "#detail-title", "#detail-why", "#log", "#who"):
        assert page.locator(emptied).text_content() == "", emptied
    page.evaluate("window.asked = {}")
    failed = []  # dora's first refresh fails (the projects): her page stays hidden

    def once(route: Any) -> None:
        if failed:
            route.continue_()
            return
        failed.append(route.request.url)
        route.fulfill(status=503, json={"error": {"message": "the database is away"}})

    page.route("**/api/v1/projects", once)
    _sign_in(page, token, "dora (user)")
    expect(page.locator("#status")).to_contain_text("cannot refresh: the database is away")
    assert page.locator("#main").is_hidden()  # not the admin's view, not an empty one
    expect(page.locator("#main")).to_be_visible(timeout=15_000)  # her next refresh
    expect(row).to_have_count(0)
    expect(page.locator('#nodes button[data-action="drain"]')).to_have_count(0)
    expect(page.locator("#nodes tbody tr").first).to_contain_text("localhost")
    # the failed refresh's week of usage was asked for again by the next one, not 30 s later
    assert page.evaluate("window.asked['/api/v1/usage']") == 2
    with live.client() as c:
        c.post(f"/jobs/{theirs['id']}/cancel").raise_for_status()


def test_signing_out_during_the_first_refresh_starts_no_timer(live: Live, page: Any) -> None:
    from playwright.sync_api import expect

    page.evaluate("window.arm()")  # the first refresh hangs on the nodes
    page.fill("#token", live.token)
    page.click("#login button")
    page.wait_for_function("() => window.release !== undefined")
    page.click("#logout")
    page.evaluate("window.release()")
    page.wait_for_function("() => window.heldParsed === true")  # that refresh, and start(), end
    assert page.evaluate("window.timers") == 0  # no timer: nothing polls without a token
    assert "Bearer null" not in page.evaluate("window.bearers")
    expect(page.locator("#status")).to_have_text("signed out")
    assert page.locator("#status").get_attribute("class") != "error"
    expect(page.locator("#main")).to_be_hidden()


def test_cancel_drain_cordon_and_close_gpu_ask_first_and_keep_a_reason(
    live: Live, page: Any
) -> None:
    from playwright.sync_api import expect

    with live.client() as c:
        job = c.post("/jobs", json=spec("victim", "import time; time.sleep(60)")).json()
        wait_state(c, job["id"], "RUNNING")
        body = {
            "name": "lr",
            "trial": spec("trial", "import time; time.sleep(60)", resources={"gpus": 2}),
            "parameters": {"lr": {"values": [0.1, 0.01]}},
            "method": "grid",
        }
        sweep = c.post("/sweeps", json=body).json()
        c.post("/cluster/nodes/localhost/cordon", json={"reason": "disk swap"}).raise_for_status()
    _sign_in(page, live.token, "admin (admin)")
    node = page.locator("#nodes tbody tr").first
    expect(node).to_contain_text("cordoned: disk swap")

    page.locator(f'#jobs tr[data-job="{job["id"]}"] button[data-action="cancel"]').click()
    page.locator(
        f'#sweeps tr[data-sweep="{sweep["id"]}"] button[data-action="cancel-sweep"]'
    ).click()
    (job_type, job_asked, _), (sweep_type, sweep_asked, _) = page.dialogs  # both dismissed
    assert job_type == "confirm" and f"Cancel job {job['id']} (victim" in job_asked
    assert sweep_type == "confirm" and f"Cancel sweep {sweep['id']} (lr" in sweep_asked
    with live.client() as c:
        assert c.get(f"/jobs/{job['id']}").json()["state"] == "RUNNING"
        assert c.get(f"/sweeps/{sweep['id']}").json()["state"] == "RUNNING"

    page.answers[:] = [True]  # a drain of the cordoned node keeps its reason
    node.locator('button[data-action="drain"]').click()
    kind, asked, _ = page.dialogs[-1]
    assert kind == "confirm" and "Drain node localhost?" in asked
    assert "1 job(s) will be preempted" in asked and "disk swap" in asked
    expect(node).to_contain_text("draining: disk swap")
    with live.client() as c:
        assert c.get("/cluster/nodes").json()[0]["cordon_reason"] == "disk swap"

    gpu = "1" if job["id"] in node.locator("td").nth(6).text_content() else "0"  # a free GPU
    free = page.locator(f'#nodes button[data-action="cordon-gpu"]:text-is("Close GPU {gpu}")')
    page.answers[:] = ["bad fan"]  # a new close: the reason typed in the prompt
    free.click()
    kind, asked, default = page.dialogs[-1]
    assert kind == "prompt" and f"Close GPU {gpu} of node localhost" in asked
    assert default == "from the dashboard by admin"
    expect(page.locator("#nodes tbody")).to_contain_text(f"{gpu} (cordoned: bad fan)")

    with live.client() as c:
        c.post("/cluster/nodes/localhost/uncordon").raise_for_status()
    cordon = node.locator('button[data-action="cordon"]')
    expect(cordon).to_have_count(1)
    page.answers[:] = [True]  # the prompt's own reason
    cordon.click()
    kind, asked, _ = page.dialogs[-1]
    assert kind == "prompt" and "Cordon node localhost?" in asked
    expect(node).to_contain_text("cordoned: from the dashboard by admin")
    assert len(page.dialogs) == 5
    with live.client() as c:
        c.post(f"/sweeps/{sweep['id']}/cancel").raise_for_status()
        c.post(f"/jobs/{job['id']}/cancel").raise_for_status()


def test_the_job_panel_shows_the_newest_events_in_view_and_a_cut_chart(
    live: Live, page: Any
) -> None:
    from playwright.sync_api import expect

    with live.client() as c:
        job = c.post("/jobs", json=spec("long", "import time; time.sleep(60)")).json()
        wait_state(c, job["id"], "RUNNING")
        steps = [{"step": i, "loss": 1000.0 - i} for i in range(1, 601)]
        c.post(f"/jobs/{job['id']}/metrics", json={"metrics": steps}).raise_for_status()
    asked: list[str] = []
    page.on("request", lambda r: asked.append(r.url) if "/events?" in r.url else None)
    page.set_viewport_size({"width": 1280, "height": 300})  # the panel opens below the fold
    _sign_in(page, live.token, "admin (admin)")
    page.locator(f'#jobs tr[data-job="{job["id"]}"] button[data-action="show"]').click()
    expect(page.locator("#metric-range")).to_have_text(
        "loss 400.0 at step 600 (min 400.0, max 899.0, steps 101-600, last 500 records)"
    )
    top = page.evaluate("document.getElementById('detail').getBoundingClientRect().top")
    assert 0 <= top < 300  # scrolled into view
    own = [url for url in asked if f"/jobs/{job['id']}/events?" in url]
    assert own and all("tail=true" in url for url in own), own
    with live.client() as c:
        c.post(f"/jobs/{job['id']}/cancel").raise_for_status()
