"""The dashboard with long reasons, in a hidden tab and with refused values, in a real browser
(the server and browser fixtures of ``test_dashboard``):

- a cordon reason of a node or of one GPU (up to 500 characters) with no place to break
  wraps in its cell: the Cluster table kept it on one line, thousands of pixels wide, so the
  GPU's memory, its jobs and the admin's Open GPU button were far out of the window;
- a tab that is hidden (another tab in front, the window minimised) asks the API nothing:
  it refreshed every 2 s all the same, 7 requests each time (a list of up to 1,000 pending
  jobs among them), for a page nobody reads; shown again, it refreshes at once;
- an action the API refuses for one of its values names that value's field, as the cli
  does (``reason: ...``): the page said the message alone ("String should have at most 500
  characters"), leaving the admin to guess what was too long.

Without ``/usr/bin/chromium`` these tests are skipped, unless ``DANLU_TEST_REQUIRE_BROWSER``
is set."""

from __future__ import annotations

from typing import Any

import pytest
import test_dashboard
import test_dashboard_views
from helpers import Live

live = test_dashboard.live
browser = test_dashboard.browser
page = test_dashboard_views.page  # a new tab; no script error unseen; dialogs accepted

_TOO_WIDE = "(element) => element.scrollWidth > element.clientWidth"
# the tab hidden, or shown again, as the browser tells the page (document.hidden and the
# visibilitychange event)
_SET_HIDDEN = """(hidden) => {
  Object.defineProperty(document, "hidden", { configurable: true, get: () => hidden });
  Object.defineProperty(document, "visibilityState", {
    configurable: true, get: () => (hidden ? "hidden" : "visible"),
  });
  document.dispatchEvent(new Event("visibilitychange"));
}"""


def test_a_long_cordon_reason_wraps_and_keeps_the_table_in_the_window(
    live: Live, page: Any
) -> None:
    from playwright.sync_api import expect

    node_reason = "n" * 500  # the longest the API takes, with nothing to break it at
    gpu_reason = "<b>x</b>" + "g" * 492
    with live.client() as c:
        node = c.get("/cluster/nodes").json()[0]["name"]
        c.post(f"/cluster/nodes/{node}/cordon", json={"reason": node_reason}).raise_for_status()
        c.post(
            f"/cluster/nodes/{node}/cordon", json={"gpu": 1, "reason": gpu_reason}
        ).raise_for_status()
    page.set_viewport_size({"width": 1280, "height": 800})
    page.fill("#token", live.token)
    page.click("#login button")
    first = page.locator("#nodes tbody tr").nth(0)
    second = page.locator("#nodes tbody tr").nth(1)
    expect(first.locator("td").nth(1)).to_have_text(f"cordoned: {node_reason}")
    expect(second.locator("td").nth(2)).to_have_text(f"1 (cordoned: {gpu_reason})")
    section = page.locator("section", has=page.locator("#nodes"))
    assert section.evaluate(_TOO_WIDE) is False  # no sideways scroll of a 1280-pixel window
    open_gpu = second.locator('button[data-action="uncordon-gpu"]')
    for button in (open_gpu, first.locator("button").last):
        box = button.bounding_box()
        assert box is not None and box["x"] + box["width"] <= 1280  # in sight
    open_gpu.click()
    expect(second.locator("td").nth(2)).to_have_text("1")


def test_a_hidden_tab_asks_nothing_and_refreshes_once_shown_again(live: Live, page: Any) -> None:
    from playwright.sync_api import expect

    page.fill("#token", live.token)
    page.click("#login button")
    expect(page.locator("#main")).to_be_visible()
    asked: list[str] = []
    page.on("request", lambda request: asked.append(request.url))
    page.evaluate(_SET_HIDDEN, True)
    page.wait_for_function("refreshing === 0")
    asked.clear()
    generation = page.evaluate("session.generation")
    page.evaluate("tick()")  # the timer's turn, as it comes every 2 s
    assert page.evaluate("session.generation") == generation  # no refresh begun
    page.wait_for_timeout(4500)  # two turns of the timer, at least
    assert [url for url in asked if "/api/v1/" in url] == []
    # shown again: at once, not at the timer's next turn (stopped here: only the tab's
    # being shown can refresh it)
    page.evaluate("clearInterval(timer)")
    with page.expect_request(lambda request: request.url.endswith("/api/v1/cluster/nodes")):
        page.evaluate(_SET_HIDDEN, False)
    expect(page.locator("#status")).to_contain_text("updated")


@pytest.mark.parametrize(
    ("reason", "said"),
    [
        ("z" * 501, "reason: String should have at most 500 characters"),
        ("executor: away", "reason: 'executor: away' begins with 'executor: '"),
    ],
)
def test_a_refused_value_is_said_with_its_field(
    live: Live, browser: Any, reason: str, said: str
) -> None:
    from playwright.sync_api import Dialog, expect

    context = browser.new_context()
    try:
        page = context.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))

        def answer(dialog: Dialog) -> None:
            if dialog.type == "prompt":  # the admin's reason for the cordon
                dialog.accept(reason)
            else:
                dialog.accept()

        page.on("dialog", answer)
        page.goto(f"{live.url}/")
        page.fill("#token", live.token)
        page.click("#login button")
        node = page.locator("#nodes tbody tr").first
        node.locator('button[data-action="cordon"]').click()
        name = node.get_attribute("data-node")
        expect(page.locator("#status")).to_contain_text(f"cordon {name}: {said}")
        expect(node.locator("td").nth(1)).to_have_text("ready")  # refused: nothing changed
        assert errors == []
    finally:
        context.close()
