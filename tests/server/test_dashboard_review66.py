"""The dashboard's review-66 fixes, in a real browser (the fixtures of ``test_dashboard``):

- a token holding a character no danlu token has (a pasted ``”``, a zero-width space) is
  refused before any request, with the sign-in form shown again, not retried forever;
- only the newest refresh renders: one that ends after a newer one began shows nothing
  (a job cancelled meanwhile does not come back as RUNNING), and the timer starts no
  refresh while one is in flight;
- a node with a scheduled cordon or drain has an Uncordon button (which drops it);
- a job held, then cancelled, reads ``CANCELLED``, not ``CANCELLED (held)``."""

from __future__ import annotations

import time
from typing import Any

import pytest
import test_dashboard
from helpers import Live, spec, wait_state

live = test_dashboard.live
browser = test_dashboard.browser
page = test_dashboard.page

_NOT_A_TOKEN = "a danlu token holds only letters, digits, '_' and '-'"

# Before sign-in: window.setInterval counts the ticks of the page's timer, and window.fetch,
# once armed, holds the first answer to the running-jobs list until window.release() (the
# answer was made before; window.heldParsed is set when the page has read it, after which
# the refresh that asked for it has rendered, or not, in the same task).
_GATE = """() => {
  window.ticks = 0;
  window.started = 0;  // the refreshes begun (each asks for the nodes once)
  const every = window.setInterval;
  window.setInterval = (callback, ms) => every(() => { window.ticks += 1; callback(); }, ms);
  let armed = false;
  window.arm = () => { armed = true; };
  const fetch = window.fetch;
  window.fetch = async (url, init) => {
    if (String(url).endsWith("/cluster/nodes")) window.started += 1;
    const response = await fetch(url, init);
    if (armed && String(url).includes("/jobs?state=RUNNING")) {
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


@pytest.mark.parametrize(
    "bad",
    ["\u201d", "\u200b", " x"],
    ids=["closing-quote", "zero-width-space", "inner-space"],
)
def test_a_token_with_a_foreign_character_is_refused_before_any_request(
    live: Live, page: Any, bad: str
) -> None:
    from playwright.sync_api import expect

    asked: list[str] = []
    page.on("request", lambda r: asked.append(r.url) if "/users/me" in r.url else None)
    page.fill("#token", live.token + bad)
    page.click("#login button")
    expect(page.locator("#status")).to_contain_text(_NOT_A_TOKEN)
    expect(page.locator("#login")).to_be_visible()
    expect(page.locator("#logout")).to_be_hidden()
    assert page.evaluate("sessionStorage.getItem('danlu-token')") is None  # forgotten
    # one kept by an earlier page (a reload) is refused and forgotten too
    page.evaluate("(t) => sessionStorage.setItem('danlu-token', t)", "dl_bad" + bad + "token")
    page.reload()
    expect(page.locator("#status")).to_contain_text(_NOT_A_TOKEN)
    expect(page.locator("#login")).to_be_visible()
    assert page.evaluate("sessionStorage.getItem('danlu-token')") is None
    assert asked == []  # never sent
    page.fill("#token", f"  {live.token}\n")  # blanks around it are not part of it
    page.click("#login button")
    expect(page.locator("#who")).to_have_text("admin (admin)")


def test_an_older_slower_refresh_does_not_overwrite_a_newer_one(live: Live, page: Any) -> None:
    from playwright.sync_api import expect

    with live.client() as c:
        victim = c.post("/jobs", json=spec("victim", "import time; time.sleep(60)")).json()
        wait_state(c, victim["id"], "RUNNING")
    page.evaluate(_GATE)
    page.fill("#token", live.token)
    page.click("#login button")
    row = page.locator(f'#jobs tr[data-job="{victim["id"]}"]')
    expect(row.locator("td.state")).to_have_text("RUNNING")
    page.evaluate("window.arm()")  # the timer's next refresh hangs on the running jobs
    page.wait_for_function("() => window.release !== undefined")
    started = page.evaluate("window.started")
    ticks = page.evaluate("window.ticks")
    page.wait_for_function("(n) => window.ticks > n", arg=ticks)  # a tick while that refresh hangs
    assert page.evaluate("window.started") == started  # began no other refresh
    with live.client() as c:
        c.post(f"/jobs/{victim['id']}/cancel").raise_for_status()
        wait_state(c, victim["id"], "CANCELLED")
    page.select_option("#filter", "all")  # a newer refresh: it renders
    expect(row.locator("td.state")).to_have_text("CANCELLED")
    page.evaluate("window.release()")  # the older one ends: it renders nothing
    page.wait_for_function("() => window.heldParsed === true")
    assert row.locator("td.state").text_content() == "CANCELLED"
    assert row.locator('button[data-action="cancel"]').count() == 0
    assert page.locator("#status").get_attribute("class") != "error"


def test_a_scheduled_drain_can_be_dropped_and_a_cancelled_job_is_not_held(
    live: Live, page: Any
) -> None:
    from playwright.sync_api import expect

    with live.client() as c:  # a job held while it waits, then cancelled
        c.post("/cluster/nodes/localhost/cordon", json={}).raise_for_status()
        job = c.post("/jobs", json=spec("heldcancel", "pass")).json()
        c.patch(f"/jobs/{job['id']}", json={"held": True}).raise_for_status()
        c.post(f"/jobs/{job['id']}/cancel").raise_for_status()
        c.post("/cluster/nodes/localhost/uncordon").raise_for_status()
        at = {"at": time.time() + 7200, "reason": "maint"}  # a maintenance window
        c.post("/cluster/nodes/localhost/drain", json=at).raise_for_status()
        assert c.get(f"/jobs/{job['id']}").json()["held_at"] is not None
    page.fill("#token", live.token)
    page.click("#login button")
    node = page.locator("#nodes tbody tr").first
    expect(node).to_contain_text("ready; drain at ")
    expect(node).to_contain_text(": maint")
    page.select_option("#filter", "all")
    state = page.locator(f'#jobs tr[data-job="{job["id"]}"] td.state')
    expect(state).to_have_text("CANCELLED")
    uncordon = node.locator('button[data-action="uncordon"]')
    expect(uncordon).to_have_count(1)
    uncordon.click()  # drops the window
    expect(node).not_to_contain_text("drain at")
    with live.client() as c:
        assert c.get("/cluster/nodes").json()[0]["close_at"] is None
    expect(node.locator('button[data-action="uncordon"]')).to_have_count(0)  # nothing to drop
