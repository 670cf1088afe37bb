"""The dashboard shows every value a user can put in the API as text, in a real browser (the
server and browser fixtures of ``test_dashboard``): a metric's name, a sweep's metric, a
job's log, a scheduled drain's and a GPU cordon's reason, and an API error's message that
echoes a request, each written as markup, show literally; nothing of them runs, and the
page's Content-Security-Policy never has to block anything (markup parsed from them would
be an inline handler it blocks, reported as a violation).

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

_IMG = '<img src=x onerror="window.pwned=1">'
_SCRIPT = "<script>window.pwned=2</script>"

# Before the page's own script: every violation of its Content-Security-Policy is kept.
_VIOLATIONS = """
window.violations = [];
document.addEventListener("securitypolicyviolation", (event) => {
  window.violations.push(event.violatedDirective + " " + event.blockedURI);
});
"""


@pytest.fixture
def page(live: Live, browser: Any) -> Iterator[Any]:
    """A new tab on the dashboard that keeps its policy's violations; dialogs accepted."""
    context = browser.new_context()
    try:
        context.add_init_script(_VIOLATIONS)
        tab = context.new_page()
        errors: list[str] = []
        tab.on("pageerror", lambda exc: errors.append(str(exc)))
        tab.on("dialog", lambda dialog: dialog.accept())
        tab.goto(f"{live.url}/")
        yield tab
        assert errors == []
    finally:
        context.close()


def test_values_written_as_markup_show_as_text_and_nothing_runs(live: Live, page: Any) -> None:
    from playwright.sync_api import expect

    with live.client() as c:
        code = f"print({_IMG!r}); print({_SCRIPT!r}, flush=True); import time; time.sleep(60)"
        busy = c.post("/jobs", json=spec("busy", code)).json()
        wait_state(c, busy["id"], "RUNNING")
        records = [{"step": i, "loss": 1.0 / i, _IMG: float(i)} for i in range(1, 5)]
        c.post(f"/jobs/{busy['id']}/metrics", json={"metrics": records}).raise_for_status()
        sweep = {
            "name": "hostile",
            "trial": spec("trial", "import time; time.sleep(60)"),
            "parameters": {_IMG: {"values": [1]}},
            "metric": {"name": _IMG},
            "method": "grid",
        }
        c.post("/sweeps", json=sweep).raise_for_status()
        later = {"reason": _SCRIPT, "at": time.time() + 3600}  # a maintenance window
        c.post("/cluster/nodes/localhost/drain", json=later).raise_for_status()
        c.post("/cluster/nodes/localhost/cordon", json={"reason": _IMG, "gpu": 1})
    page.fill("#token", live.token)
    page.click("#login button")
    expect(page.locator("#who")).to_have_text("admin (admin)")
    nodes = page.locator("#nodes tbody tr")
    expect(nodes.first).to_contain_text("drain at ")
    expect(nodes.first).to_contain_text(f": {_SCRIPT}")
    expect(nodes.nth(1)).to_contain_text(f"1 (cordoned: {_IMG})")
    expect(page.locator("#sweeps tbody tr").first).to_contain_text(f"{_IMG} (minimize)")
    page.locator(f'#jobs tr[data-job="{busy["id"]}"] button[data-action="show"]').click()
    expect(page.locator("#log")).to_contain_text(f"{_IMG}\n{_SCRIPT}")
    options = page.locator("#metric-key option")
    expect(options).to_have_count(2)
    page.select_option("#metric-key", _IMG)  # its value is the name as it is
    expect(page.locator("#metric-range")).to_contain_text(f"{_IMG} 4.000 at step 4")
    # an API error that echoes what was asked for: a job "id" written as markup
    page.evaluate("(id) => showJob(id)", _IMG)
    expect(page.locator("#status")).to_contain_text(f"job '{_IMG}' not found")
    expect(page.locator("#detail")).to_be_hidden()  # nothing of the job shown before stays
    assert page.evaluate("window.pwned") is None
    assert page.evaluate("window.violations") == []  # nothing was parsed as markup
    assert page.locator("header img, #status img, #main img, #main script").count() == 0


def test_a_node_without_gpus_has_a_row_with_its_state_and_actions(live: Live, page: Any) -> None:
    """A node that reports no GPUs (a CPU node of a Slurm partition) had no row at all: the
    summary counted it, cordoned, and nothing said which node that was, or let an admin
    open it again."""
    from playwright.sync_api import Route, expect

    bare = {
        "name": "cpu-1",
        "gpu_type": "",
        "rack": "rack-1",
        "fake": False,
        "gpus": [],
        "state": "cordoned",
        "cordoned_at": 1.0,
        "cordon_reason": f"executor: down {_IMG}",
        "launch_failures": 0,
        "close_at": None,
        "close_action": None,
        "close_reason": "",
    }

    def with_bare_node(route: Route) -> None:
        answer = route.fetch()
        route.fulfill(response=answer, json=[*answer.json(), bare])

    page.route("**/api/v1/cluster/nodes", with_bare_node)
    page.fill("#token", live.token)
    page.click("#login button")
    expect(page.locator("#summary")).to_contain_text("2 node(s) (1 ready, 1 cordoned), 2 GPU(s)")
    row = page.locator('#nodes tr[data-node="cpu-1"]')
    expect(row).to_have_count(1)
    cells = row.locator("td")
    expect(cells).to_have_count(8)  # as many as the table's columns
    expect(cells.nth(0)).to_have_text("cpu-1")
    expect(cells.nth(1)).to_have_text(f"cordoned: executor: down {_IMG}")
    expect(row.locator('button[data-action="uncordon"]')).to_have_count(1)
    expect(row.locator('button[data-action="drain"]')).to_have_count(1)
    assert page.evaluate("window.violations") == []
