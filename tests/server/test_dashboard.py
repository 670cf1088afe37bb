"""The web dashboard in a real browser (Debian's ``chromium``, driven by Playwright) against a
real server: sign in with a token, see the nodes and the jobs and a job's events, reason
and log, hold, release, cancel and rerun a job, uncordon and drain a node; a cordon reason written
like markup stays text; a wrong token is refused.

Without ``/usr/bin/chromium`` the browser tests are skipped, unless
``DANLU_TEST_REQUIRE_BROWSER`` is set (CI: ``scripts/test.sh`` installs it). The static files'
headers are checked without a browser."""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from helpers import Live, live_server, spec, wait_state

from danlu.core.job_array import array_sweep, parse_array

_XSS = '<img src=x onerror="window.pwned=1">'


def _chromium() -> str | None:
    found = shutil.which("chromium")
    if found is None and os.environ.get("DANLU_TEST_REQUIRE_BROWSER"):
        pytest.fail("chromium is required: apt-get install -y chromium")
    return found


@pytest.fixture
def live(tmp_path: Path) -> Iterator[Live]:
    with live_server(tmp_path, fake_gpus="2x80GiB", energy_interval=0.2) as server:
        yield server


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """One Chromium for the module's tests (each gets its own context): CI has 2 cores."""
    binary = _chromium()
    if binary is None:
        pytest.skip("chromium is absent and DANLU_TEST_REQUIRE_BROWSER is unset")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        launched = p.chromium.launch(executable_path=binary, args=["--no-sandbox"])
        try:
            yield launched
        finally:
            launched.close()


@pytest.fixture
def page(live: Live, browser: Any) -> Iterator[Any]:
    context = browser.new_context()  # its own session storage
    try:
        tab = context.new_page()
        errors: list[str] = []
        tab.on("pageerror", lambda exc: errors.append(str(exc)))
        tab.on("dialog", lambda dialog: dialog.accept())  # Cancel, Drain, ... ask first
        tab.on(  # a file the page asks for and does not get
            "response",
            lambda r: errors.append(f"{r.status} {r.url}") if r.status == 404 else None,
        )
        tab.goto(f"{live.url}/")
        yield tab
        assert errors == []  # no script error on the page, nothing it asked for missing
    finally:
        context.close()


def test_the_files_are_served_with_a_strict_policy_and_nothing_else(live: Live) -> None:
    root = httpx.get(f"{live.url}/", follow_redirects=False)
    assert root.status_code == 307 and root.headers["location"] == "/dashboard/"
    page = httpx.get(f"{live.url}/dashboard/")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    policy = page.headers["content-security-policy"]
    assert "script-src 'self'" in policy and "default-src 'none'" in policy
    assert page.headers["x-content-type-options"] == "nosniff"
    script = httpx.get(f"{live.url}/dashboard/app.js")
    assert script.headers["content-type"].startswith("text/javascript")
    assert "textContent" in script.text and "innerHTML" not in script.text
    assert '<link rel="icon" href="favicon.svg"' in page.text  # browsers asked for a 404 before
    icon = httpx.get(f"{live.url}/dashboard/favicon.svg")
    assert icon.headers["content-type"] == "image/svg+xml" and icon.text.startswith("<svg")
    for name in ("nope.js", "..%2Fapp.py", "%2E%2E", "index.htm"):
        assert httpx.get(f"{live.url}/dashboard/{name}").status_code == 404, name


def test_sign_in_see_the_cluster_and_hold_release_cancel_jobs(live: Live, page: Any) -> None:
    from playwright.sync_api import expect

    with live.client() as c:
        code = "print('hello from busy', flush=True); import time; time.sleep(60)"
        busy = c.post("/jobs", json=spec("busy", code)).json()
        wait_state(c, busy["id"], "RUNNING")
        queued = c.post(
            "/jobs", json=spec("queued", "pass", resources={"gpus": 2}, priority=-1)
        ).json()
        c.post("/cluster/nodes/localhost/cordon", json={"reason": _XSS})
        c.post("/cluster/nodes/localhost/cordon", json={"reason": _XSS, "gpu": 1})
        c.post("/projects", json={"name": "vision", "members": ["admin"]}).raise_for_status()
        steps = [{"step": i, "lr": 0.1, "loss": 4.0 / i, "tag": _XSS} for i in range(1, 30)]
        c.post(f"/jobs/{busy['id']}/metrics", json={"metrics": steps}).raise_for_status()
    page.fill("#token", "not-a-token")
    page.click("#login button")
    expect(page.locator("#status")).to_contain_text("token refused")
    page.fill("#token", live.token)
    page.click("#login button")
    expect(page.locator("#who")).to_have_text("admin (admin)")
    nodes = page.locator("#nodes tbody tr")
    expect(nodes).to_have_count(2)
    expect(nodes.first).to_contain_text(f"cordoned: {_XSS}")  # as text, not an image
    expect(nodes.nth(1)).to_contain_text(f"1 (cordoned: {_XSS})")  # one GPU closed alone
    nodes.nth(1).locator('button[data-action="uncordon-gpu"]').click()  # an admin opens it
    expect(nodes.nth(1).locator('button[data-action="cordon-gpu"]')).to_have_text("Close GPU 1")
    expect(nodes.nth(1)).not_to_contain_text("cordoned")
    with live.client() as c:
        assert c.get("/cluster/nodes").json()[0]["gpus"][1]["state"] == "ready"
    assert page.evaluate("window.pwned") is None
    expect(page.locator("#summary")).to_contain_text("1 node(s) (1 cordoned), 2 GPU(s)")
    default = page.locator('#projects tr[data-project="default"] td')  # busy holds a GPU
    expect(default.nth(3)).to_have_text("1")  # share
    expect(default.nth(4)).to_have_text("1.00")
    expect(default.nth(5)).to_have_text("-")  # the priority policy keeps no history
    expect(default.nth(6)).to_have_text("everyone")  # no members: open to every user
    vision = page.locator('#projects tr[data-project="vision"] td')
    expect(vision.nth(6)).to_have_text("admin")
    running = page.locator(f'#jobs tr[data-job="{busy["id"]}"]')
    expect(running.locator("td.state")).to_have_text("RUNNING")
    feed = page.locator("#feed tbody tr", has_text=busy["id"])  # the recent events
    expect(feed.filter(has_text="PENDING -> RUNNING")).to_have_count(1)
    expect(feed.filter(has_text="submitted")).to_have_count(1)
    expect(running.locator('button[data-action="hold"]')).to_have_count(1)  # by checkpoint
    waiting = page.locator(f'#jobs tr[data-job="{queued["id"]}"]')
    expect(waiting.locator("td.state")).to_have_text("PENDING")
    waiting.locator('button[data-action="hold"]').click()
    expect(waiting.locator("td.why")).to_have_text("held by admin")
    expect(waiting.locator("td.state")).to_have_text("PENDING")  # held is said once: the why
    with live.client() as c:
        assert c.get(f"/jobs/{queued['id']}").json()["held_at"] is not None
    waiting.locator('button[data-action="release"]').click()
    expect(waiting.locator('button[data-action="hold"]')).to_have_count(1)
    expect(waiting.locator("td.why")).not_to_have_text("held by admin")
    running.locator('button[data-action="show"]').click()  # its events, why and log
    detail = page.locator("#detail")
    expect(detail).to_be_visible()
    expect(page.locator("#detail-title")).to_have_text(f"busy ({busy['id']})")
    expect(page.locator("#detail-why")).to_contain_text("RUNNING on localhost")  # the state once
    expect(page.locator("#events tbody tr")).to_have_count(2)
    expect(page.locator("#events tbody tr").nth(1)).to_contain_text("PENDING \u2192 RUNNING")
    expect(page.locator("#log")).to_contain_text("hello from busy")
    expect(page.locator("#detail-energy")).to_have_text(
        re.compile(r"^energy: (\S+ [kM]?Wh|not metered)$")
    )
    expect(page.locator("#metric-key")).to_have_value("loss")  # loss, though lr came first
    expect(page.locator("#metric-key option")).to_have_count(2)  # the numbers only
    expect(page.locator("#metric-chart polyline")).to_have_count(1)
    expect(page.locator("#metric-range")).to_have_text(
        "loss 0.1379 at step 29 (min 0.1379, max 4.000, steps 1-29)"
    )
    page.select_option("#metric-key", "lr")
    expect(page.locator("#metric-range")).to_contain_text("lr 0.1000 at step 29")
    page.click("#detail-close")
    expect(detail).to_be_hidden()
    running.locator('button[data-action="cancel"]').click()
    expect(running).to_have_count(0, timeout=15_000)  # gone from the unfinished jobs
    with live.client() as c:
        assert wait_state(c, busy["id"], "CANCELLED")["state"] == "CANCELLED"
    usage = page.locator("#usage tbody tr")  # the cancelled job's stretch on its GPU
    expect(usage).to_have_count(1)
    expect(usage.first).to_contain_text("default")
    expect(usage.first.locator("td").nth(4)).to_have_text("1")
    expect(usage.first.locator("td").nth(5)).to_have_text(re.compile(r"^\d+\.\d{3}$"))  # kWh
    page.select_option("#filter", "all")
    expect(running.locator("td.state")).to_have_text("CANCELLED")
    expect(running.locator('button[data-action="cancel"]')).to_have_count(0)
    running.locator('button[data-action="rerun"]').click()  # a new job with busy's spec
    expect(page.locator("#jobs tr", has_text="busy")).to_have_count(2)
    with live.client() as c:
        again = [j for j in c.get("/jobs").json() if j["name"] == "busy" and j["id"] != busy["id"]]
        assert len(again) == 1 and again[0]["spec"]["command"] == busy["spec"]["command"]
        c.post(f"/jobs/{again[0]['id']}/cancel")
    first = nodes.first  # an admin opens and drains the node
    first.locator('button[data-action="uncordon"]').click()
    expect(first).to_contain_text("ready")
    expect(page.locator("#summary")).to_contain_text("(1 ready)")
    first.locator('button[data-action="drain"]').click()
    expect(first).to_contain_text("draining: from the dashboard")
    with live.client() as c:
        assert c.get("/cluster/nodes").json()[0]["state"] == "draining"
    with live.client() as c:  # a sweep, and a job waiting for one of its trials
        body = {
            "name": "lr",
            "trial": spec("trial", "import time; time.sleep(60)"),
            "parameters": {"lr": {"values": [0.1, 0.01]}},
            "metric": {"name": "loss"},
            "method": "grid",
        }
        sweep = c.post("/sweeps", json=body).json()
        after = {"job": sweep["trials"][0]["job_id"], "condition": "finished"}
        c.post("/jobs", json=spec("after", "pass", depends_on=[after]))
    page.select_option("#filter", "unfinished")
    row = page.locator(f'#sweeps tr[data-sweep="{sweep["id"]}"]')
    expect(row).to_contain_text("1 / 2")
    after_row = page.locator("#jobs tr", has_text="after")
    expect(after_row.locator("td.why")).to_contain_text(f"waiting for job {after['job']} (")
    expect(after_row.locator("td.state")).to_have_text("PENDING")  # the why says it waits
    row.locator('button[data-action="cancel-sweep"]').click()
    expect(row.locator("td.state")).to_have_text("CANCELLED by admin")  # the state once
    page.click("#logout")
    expect(page.locator("#main")).to_be_hidden()
    page.reload()  # the token was forgotten: signed out for good
    expect(page.locator("#login")).to_be_visible()


def test_a_user_sees_their_own_jobs_and_no_admin_buttons(live: Live, page: Any) -> None:
    from playwright.sync_api import expect

    with live.client() as c:
        c.post("/users", json={"name": "dora"}).raise_for_status()
        token = c.post("/users/dora/tokens", json={"name": "web"}).json()["token"]
        theirs = c.post("/jobs", json=spec("admins", "import time; time.sleep(30)")).json()
    with live.client(token) as dora:
        mine = dora.post("/jobs", json=spec("doras", "import time; time.sleep(30)")).json()
        wait_state(dora, mine["id"], "RUNNING")
    page.fill("#token", token)
    page.click("#login button")
    expect(page.locator("#who")).to_have_text("dora (user)")
    expect(page.locator(f'#jobs tr[data-job="{mine["id"]}"]')).to_have_count(1)
    expect(page.locator(f'#jobs tr[data-job="{theirs["id"]}"]')).to_have_count(0)
    expect(page.locator("#nodes tbody tr").first).to_contain_text("localhost")
    expect(page.locator('#nodes button[data-action="cordon"]')).to_have_count(0)
    page.locator(f'#jobs tr[data-job="{mine["id"]}"] button[data-action="cancel"]').click()
    with live.client() as c:
        assert wait_state(c, mine["id"], "CANCELLED")["state"] == "CANCELLED"
        c.post(f"/jobs/{theirs['id']}/cancel")


def test_a_long_queue_old_running_sweeps_a_live_detail_and_an_outage(
    live: Live, page: Any, tmp_path: Path
) -> None:
    """More unfinished jobs than the table shows: every running one is listed and the page
    says the list is cut; a running array older than 20 sweeps keeps its row and Cancel; a
    memory-only project quota is shown; the open job's panel follows the job until it ends;
    a reload while the API answers 503 keeps the token and signs in once it answers."""
    from playwright.sync_api import expect

    go_on = tmp_path / "go-on"
    code = (
        "import os, time\n"
        "for i in range(80): print(f'line {i}', flush=True)\n"
        f"while not os.path.exists({str(go_on)!r}): time.sleep(0.05)\n"
        "print('went on', flush=True)\n"
        "time.sleep(60)\n"
    )
    with live.client() as c:
        busy = c.post("/jobs", json=spec("busy", code)).json()
        wait_state(c, busy["id"], "RUNNING")  # one GPU of two: the tasks below never fit
        tasks = spec("task", "pass", resources={"gpus": 2}, priority=-1)
        array = c.post("/sweeps", json=array_sweep(tasks, parse_array("0-204"))).json()
        assert array["submitted"] == 205, array
        for i in range(20):  # 20 newer sweeps, ended
            trial = spec(f"quick{i}", "pass", resources={"gpus": 2}, priority=-9)
            quick = array_sweep(trial, parse_array("0"))
            ended = c.post("/sweeps", json=quick).json()
            c.post(f"/sweeps/{ended['id']}/cancel").raise_for_status()
        body = {"name": "mem", "quota_gpu_memory": 80 * 2**30}
        c.post("/projects", json=body).raise_for_status()
        head, tail = (c.get("/jobs", params={"name": f"task-{n}"}).json() for n in (0, 204))
    asked: list[dict[str, list[str]]] = []  # the queries of the page's sweep lists
    page.on(
        "request",
        lambda r: (
            asked.append(parse_qs(urlsplit(r.url).query))
            if urlsplit(r.url).path == "/api/v1/sweeps"
            else None
        ),
    )
    page.fill("#token", live.token)
    page.click("#login button")
    expect(page.locator("#who")).to_have_text("admin (admin)")
    running = page.locator(f'#jobs tr[data-job="{busy["id"]}"]')
    expect(running.locator("td.state")).to_have_text("RUNNING")  # the oldest, yet listed
    expect(running.locator('button[data-action="cancel"]')).to_have_count(1)
    expect(page.locator("#jobs tbody tr")).to_have_count(200)
    expect(page.locator("#jobs-note")).to_contain_text("showing 200 of 206 unfinished jobs")
    expect(page.locator(f'#jobs tr[data-job="{head[0]["id"]}"]')).to_have_count(1)  # waited longest
    expect(page.locator(f'#jobs tr[data-job="{tail[0]["id"]}"]')).to_have_count(0)
    row = page.locator(f'#sweeps tr[data-sweep="{array["id"]}"]')
    expect(row.locator("td.state")).to_have_text("RUNNING")
    expect(row.locator('button[data-action="cancel-sweep"]')).to_have_count(1)
    expect(page.locator("#sweeps tbody tr")).to_have_count(21)
    expect(page.locator("#sweeps-note")).to_have_text(
        "the 20 newest sweeps and every running one (danlu sweep ls lists them all)"
    )
    # two small lists each refresh: the 20 newest, and the RUNNING ones; no scan of 1,000
    newest, by_state = {"limit": ["20"]}, {"state": ["RUNNING"], "limit": ["1000"]}
    assert asked and all(query in (newest, by_state) for query in asked), asked
    assert newest in asked and by_state in asked, asked
    quota = page.locator('#projects tr[data-project="mem"] td').nth(2)
    expect(quota).to_have_text("80.0GiB")

    running.locator('button[data-action="show"]').click()
    log = page.locator("#log")
    expect(log).to_contain_text("line 79")
    page.evaluate("(l) => { l.scrollTop = l.scrollHeight; }", log.element_handle())
    go_on.touch()  # output after the click: the open panel shows it, still at the log's end
    expect(log).to_contain_text("went on", timeout=15_000)
    at_end = "(l) => l.scrollTop + l.clientHeight >= l.scrollHeight - 2"
    assert page.evaluate(at_end, log.element_handle())
    with live.client() as c:
        c.post(f"/jobs/{busy['id']}/cancel").raise_for_status()
        wait_state(c, busy["id"], "CANCELLED")
    expect(page.locator("#detail-why")).to_contain_text("CANCELLED", timeout=15_000)
    expect(page.locator("#detail-why")).to_contain_text("ended")
    expect(page.locator("#events tbody tr").last).to_contain_text("\u2192 CANCELLED")
    expect(row.locator('button[data-action="cancel-sweep"]')).to_have_count(1)  # still there

    outage = {"error": {"type": "unavailable", "field": None, "message": "the database is away"}}
    page.route(  # a reload while the API is briefly unavailable
        "**/api/v1/users/me",
        lambda route: route.fulfill(status=503, headers={"Retry-After": "1"}, json=outage),
    )
    page.reload()
    expect(page.locator("#status")).to_contain_text("the database is away")
    assert page.evaluate("sessionStorage.getItem('danlu-token')") == live.token
    page.unroute("**/api/v1/users/me")
    expect(page.locator("#who")).to_have_text("admin (admin)", timeout=15_000)  # by a retry
    expect(page.locator("#main")).to_be_visible()
