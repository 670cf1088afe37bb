"""A job's panel on the dashboard, in a real browser (the server and browser fixtures of
``test_dashboard``):

- the panel of a job clicked shows that job or nothing: clicking another job whose reading
  failed (or had not come yet) kept the panel of the job shown before, its name, events,
  chart and log, under its own title, while the page followed the job clicked, so what a
  reader saw there was another job's;
- a sweep's (or a job array's) trials and its best trial: the page listed the sweeps only,
  so which trial was best, each trial's parameters and value, and which job ran it were not
  on the page at all (``danlu sweep show`` only). A sweep clicked shows them, followed until
  it has ended, and a trial's job opens its panel;
- a job's panel has its owner's (or an admin's) actions, as its row in the Jobs table has
  them, and a new priority: a job whose row is on no page shown (an older job, a sweep's
  trial) could not be held, cancelled or rerun from the page, and no job's priority could be
  changed there; a priority that is not a whole number is refused on the page, naming it
  (sent as it was, it would have reached the API as no number);
- a node's history: the page showed no node's events, so who cordoned or drained a node, when
  and why, or since when it had its GPUs, was ``danlu node show``'s only. A node's name in the
  Cluster table opens its panel: its state line and its last events, newest first (time, kind,
  by whom, detail), followed by the refreshes; a node gone from the inventory shows its
  history with a note.

Without ``/usr/bin/chromium`` these tests are skipped, unless ``DANLU_TEST_REQUIRE_BROWSER``
is set."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
import test_dashboard
from helpers import Live, spec, wait_state

live = test_dashboard.live
browser = test_dashboard.browser

_SLEEP = "import time; time.sleep(60)"


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


def test_a_job_clicked_whose_reading_fails_never_shows_the_job_shown_before(
    live: Live, page: Any
) -> None:
    from playwright.sync_api import Route, expect

    with live.client() as c:
        first_code = "print('output of the first job', flush=True); " + _SLEEP
        first = c.post("/jobs", json=spec("first-job", first_code)).json()
        second = c.post("/jobs", json=spec("second-job", _SLEEP)).json()
        for job in (first, second):
            wait_state(c, job["id"], "RUNNING")
        records = [{"step": i, "loss": 1.0 / (i + 1)} for i in range(5)]
        c.post(f"/jobs/{first['id']}/metrics", json={"metrics": records}).raise_for_status()
    page.fill("#token", live.token)
    page.click("#login button")
    page.click(f'#jobs tr[data-job="{first["id"]}"] button[data-action="show"]')
    detail = page.locator("#detail")
    expect(page.locator("#detail-title")).to_have_text(f"first-job ({first['id']})")
    expect(page.locator("#log")).to_contain_text("output of the first job")
    expect(page.locator("#metrics")).to_be_visible()

    def broken(route: Route) -> None:
        route.fulfill(status=500, json={"error": {"message": "the database is away"}})

    page.route(f"**/api/v1/jobs/{second['id']}/why", broken)
    page.click(f'#jobs tr[data-job="{second["id"]}"] button[data-action="show"]')
    expect(page.locator("#status")).to_contain_text(f"show {second['id']}: the database is away")
    # nothing of the first job is left in sight as if it were the job clicked
    expect(detail).to_be_hidden()
    expect(page.locator("#detail-title")).not_to_contain_text("first-job")
    expect(page.locator("#log")).not_to_contain_text("output of the first job")
    expect(page.locator("#events tbody tr")).to_have_count(0)
    page.unroute(f"**/api/v1/jobs/{second['id']}/why", broken)
    # the page follows the job clicked: its panel shows once it can be read
    expect(page.locator("#detail-title")).to_have_text(f"second-job ({second['id']})")
    expect(detail).to_be_visible()
    expect(page.locator("#metrics")).to_be_hidden()  # the first job's chart is not the second's
    with live.client() as c:
        for job in (first, second):
            c.post(f"/jobs/{job['id']}/cancel").raise_for_status()


def test_a_sweep_clicked_shows_its_trials_and_its_best_trial(live: Live, page: Any) -> None:
    from playwright.sync_api import expect

    with live.client() as c:
        sweep = {
            "name": "lr-search",
            "trial": spec("trial", _SLEEP),
            "parameters": {"lr": {"values": [0.1, 0.01]}},
            "metric": {"name": "val loss", "goal": "minimize"},
            "method": "grid",
            "parallel": 2,
        }
        created = c.post("/sweeps", json=sweep).json()
        trials = {}
        for _ in range(100):
            trials = {t["trial"]: t for t in c.get(f"/sweeps/{created['id']}").json()["trials"]}
            if len(trials) == 2:
                break
            time.sleep(0.2)
        assert len(trials) == 2
        for trial, loss in ((0, 0.5), (1, 0.25)):
            records = [{"step": 3, "val loss": loss + 1.0}, {"step": 7, "val loss": loss}]
            job_id = trials[trial]["job_id"]
            c.post(f"/jobs/{job_id}/metrics", json={"metrics": records}).raise_for_status()
    page.fill("#token", live.token)
    page.click("#login button")
    page.click(f'#sweeps tr[data-sweep="{created["id"]}"] button[data-action="show-sweep"]')
    panel = page.locator("#sweep-detail")
    expect(panel).to_be_visible()
    title = page.locator("#sweep-title")
    expect(title).to_contain_text(f"sweep lr-search ({created['id']}): RUNNING")
    best_job = trials[1]["job_id"]
    expect(page.locator("#sweep-best")).to_have_text(
        f"best: trial 1 (job {best_job}), val loss 0.25"
    )
    expect(page.locator("#trials-metric")).to_have_text("val loss")
    rows = page.locator("#trials tbody tr")
    expect(rows).to_have_count(2)
    expect(rows.nth(0)).to_contain_text("lr=0.1")
    expect(rows.nth(0)).to_contain_text("0.5")
    expect(rows.nth(1)).to_contain_text("lr=0.01")
    expect(rows.nth(1)).to_have_class("best")
    # a trial's job opens the job's panel
    rows.nth(1).locator('button[data-action="show"]').click()
    expect(page.locator("#detail-title")).to_contain_text(f"({best_job})")
    with live.client() as c:
        c.post(f"/sweeps/{created['id']}/cancel").raise_for_status()
    # followed until the sweep and its trials have ended
    expect(title).to_contain_text("CANCELLED")
    expect(rows.nth(0)).to_contain_text("CANCELLED")
    expect(rows.nth(1)).to_contain_text("CANCELLED")
    page.click("#sweep-close")
    expect(panel).to_be_hidden()


def test_a_job_array_clicked_shows_its_tasks(live: Live, page: Any) -> None:
    """Its table's first column says "task", as its title and ``danlu sweep show`` do (it said
    "trial"); a plain sweep's, "trial"."""
    from playwright.sync_api import expect

    with live.client() as c:
        array = {
            "name": "shards",
            "trial": spec("shard", "print('done')"),
            "parameters": {"index": {"values": [0, 1]}},
            "method": "grid",
            "array": True,
        }
        created = c.post("/sweeps", json=array).json()
        sweep = c.post("/sweeps", json={**array, "name": "plain", "array": False}).json()
    page.fill("#token", live.token)
    page.click("#login button")
    page.click(f'#sweeps tr[data-sweep="{created["id"]}"] button[data-action="show-sweep"]')
    expect(page.locator("#sweep-title")).to_contain_text(f"array shards ({created['id']})")
    expect(page.locator("#sweep-title")).to_contain_text("of 2 tasks submitted")
    expect(page.locator("#trials th").first).to_have_text("task")  # as danlu sweep show
    expect(page.locator("#sweep-best")).to_have_text("")  # no metric: no best
    rows = page.locator("#trials tbody tr")
    expect(rows).to_have_count(2)
    expect(rows.nth(1)).to_contain_text("index=1")
    page.click(f'#sweeps tr[data-sweep="{sweep["id"]}"] button[data-action="show-sweep"]')
    expect(page.locator("#sweep-title")).to_contain_text("of 2 trials submitted")
    expect(page.locator("#trials th").first).to_have_text("trial")


def test_the_panel_acts_on_its_job_and_sets_its_priority(live: Live, browser: Any) -> None:
    from playwright.sync_api import Dialog, expect

    with live.client() as c:
        c.post("/users", json={"name": "carol"}).raise_for_status()
        carol = c.post("/users/carol/tokens", json={}).json()["token"]
        job = c.post("/jobs", json={**spec("carols", _SLEEP), "user": "carol"}).json()
        wait_state(c, job["id"], "RUNNING")
    answers = ["7", "high"]  # what the user types in the priority prompts, in turn
    context = browser.new_context()
    try:
        page = context.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))

        def answer(dialog: Dialog) -> None:
            if dialog.type == "prompt":
                dialog.accept(answers.pop(0))
            else:
                dialog.accept()

        page.on("dialog", answer)
        page.goto(f"{live.url}/")
        page.fill("#token", carol)
        page.click("#login button")
        page.click(f'#jobs tr[data-job="{job["id"]}"] button[data-action="show"]')
        panel = page.locator("#detail-actions")
        expect(panel.locator("button")).to_have_text(["Hold", "Cancel", "Priority"])
        panel.locator('button[data-action="priority"]').click()
        with live.client() as c:
            for _ in range(50):
                if c.get(f"/jobs/{job['id']}").json()["priority"] == 7:
                    break
                time.sleep(0.1)
            assert c.get(f"/jobs/{job['id']}").json()["priority"] == 7
        expect(page.locator(f'#jobs tr[data-job="{job["id"]}"]')).to_contain_text("7")
        panel.locator('button[data-action="priority"]').click()
        expect(page.locator("#status")).to_contain_text(
            f"priority {job['id']}: a whole number is needed, not 'high'"
        )
        with live.client() as c:
            assert c.get(f"/jobs/{job['id']}").json()["priority"] == 7  # as it was
        panel.locator('button[data-action="cancel"]').click()
        expect(panel.locator("button")).to_have_text(["Rerun"])  # once it has ended
        panel.locator('button[data-action="rerun"]').click()
        with live.client() as c:
            names = [j["name"] for j in c.get("/jobs", params={"user": "carol"}).json()]
        assert names.count("carols") == 2
        assert errors == []
    finally:
        context.close()


_MARKUP = '<img src=x onerror="window.pwned=1">'


def test_a_node_clicked_shows_its_state_and_history_newest_first(live: Live, page: Any) -> None:
    from playwright.sync_api import Route, expect

    with live.client() as c:
        for action, body in (("cordon", {"reason": _MARKUP}), ("uncordon", {})):
            c.post(f"/cluster/nodes/localhost/{action}", json=body).raise_for_status()
        c.post("/cluster/nodes/localhost/cordon", json={"reason": "new DIMMs"}).raise_for_status()
    page.fill("#token", live.token)
    page.click("#login button")
    name = page.locator('#nodes tr[data-node="localhost"] button[data-action="show-node"]')
    expect(name).to_have_text("localhost (fake)")  # on the node's first row only
    name.focus()
    page.keyboard.press("Enter")  # a button: the keyboard opens it as a click does
    panel = page.locator("#node-detail")
    expect(panel).to_be_visible()
    expect(page.locator("#node-title")).to_have_text("node localhost (fake)")
    expect(page.locator("#node-state")).to_contain_text("cordoned since ")
    expect(page.locator("#node-state")).to_contain_text(": new DIMMs")
    expect(page.locator("#node-note")).to_have_text("")
    rows = page.locator("#node-events tbody tr")
    kinds = ["cordoned", "uncordoned", "cordoned", "joined"]  # newest first
    expect(rows.locator("td:nth-child(2)")).to_have_text(kinds)
    expect(rows.locator("td:nth-child(3)")).to_have_text(["admin", "admin", "admin", "-"])
    details = ["new DIMMs", f"was cordoned: {_MARKUP}", _MARKUP, "in the inventory: 2x generic"]
    expect(rows.locator("td:nth-child(4)")).to_have_text(details)  # markup shown as text
    assert page.locator("#node-detail img").count() == 0
    assert page.evaluate("window.pwned") is None
    # the time as the job's events say it: the browser's local date and time
    with live.client() as c:
        newest = c.get("/cluster/nodes/localhost/events").json()[-1]["time"]
        local = page.evaluate("(t) => new Date(t * 1000).toLocaleString()", newest)
        expect(rows.first.locator("td").first).to_have_text(local)
        c.post("/cluster/nodes/localhost/uncordon").raise_for_status()  # the panel follows it
    expect(rows).to_have_count(5)
    expect(rows.first.locator("td").nth(1)).to_have_text("uncordoned")
    expect(page.locator("#node-state")).to_have_text("ready")
    page.click("#node-close")
    expect(panel).to_be_hidden()

    def gone(route: Route) -> None:  # the node left the inventory; its history stays
        route.fulfill(status=404, json={"error": {"message": "node 'localhost' not found"}})

    page.route("**/api/v1/cluster/nodes/localhost", gone)
    name.click()
    expect(panel).to_be_visible()
    expect(page.locator("#node-note")).to_have_text("not in the inventory now: its history is kept")
    expect(page.locator("#node-title")).to_have_text("node localhost")
    expect(page.locator("#node-state")).to_have_text("")
    expect(rows).to_have_count(5)
    expect(page.locator("#status")).not_to_have_class("error")
