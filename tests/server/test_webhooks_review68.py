"""The webhook sender, review 68: an endpoint that never answers holds up only its own
deliveries (at most one post in flight per webhook; the other webhooks' due deliveries are
posted while it hangs), the backoff counts from when an attempt ended (a timed-out attempt's
10 s are not taken out of it), and every post goes through the proxy the docs name
(``HTTP_PROXY``, else ``HTTPS_PROXY``, for an http:// URL; never for a host ``NO_PROXY``
names)."""

from __future__ import annotations

import threading

import httpx
import pytest
from helpers import QuietHandler, serve_locally, wait_for

from danlu import config
from danlu.core.errors import ConfigError
from danlu.server.db import Database
from danlu.server.services import webhooks
from danlu.server.webhook_sender import WebhookSender

PROXY_VARIABLES = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY")
HOOK = "http://hooks.example.invalid/x"
TLS_HOOK = "https://hooks.example.invalid/x"


@pytest.fixture
def no_proxy_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """No proxy variable set, in either case (the test sets the ones it means)."""
    for name in PROXY_VARIABLES:
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)
    return monkeypatch


class Endpoint:
    """A real HTTP endpoint in a thread. ``hold``: each POST waits for :attr:`release`
    before it answers (200), as an endpoint that never answers until the test lets it; it
    counts the posts that arrived, those answered and the most ever in flight at once."""

    def __init__(self, hold: bool = False) -> None:
        self.release = threading.Event()
        self.arrived = 0
        self.answered = 0
        self.in_flight = 0
        self.most_at_once = 0
        self._lock = threading.Lock()
        endpoint = self

        class Handler(QuietHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers["Content-Length"]))
                with endpoint._lock:
                    endpoint.arrived += 1
                    endpoint.in_flight += 1
                    endpoint.most_at_once = max(endpoint.most_at_once, endpoint.in_flight)
                if hold:
                    endpoint.release.wait(60.0)
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()
                with endpoint._lock:
                    endpoint.in_flight -= 1
                    endpoint.answered += 1

        self.server = serve_locally(Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"

    def close(self) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()


def _ping_once(db: Database, url: str) -> str:
    """A webhook to ``url``, pinged, and the sender run once (one post made): its id."""
    with db.session() as s:
        hook_id = webhooks.create(s, url, "admin").id
        webhooks.ping(s, hook_id)
    sender = WebhookSender(db, timeout=5.0)
    try:
        assert sender.run_once() == 1
    finally:
        sender.stop()
    return hook_id


def _delivered(db: Database, hook_id: str) -> int:
    with db.read_session() as s:
        return sum(d.delivered for d in webhooks.deliveries(s, hook_id))


@pytest.mark.parametrize("when", ["queued-before-the-pass", "queued-while-it-hangs"])
def test_an_endpoint_that_never_answers_holds_up_only_its_own_deliveries(
    db: Database, when: str
) -> None:
    """Four deliveries to an endpoint that does not answer were four workers out of four,
    each for the whole timeout, and the pass waited for all of them: a healthy webhook's
    ping, queued before the pass or during it, was posted only once they timed out. Now
    one post at a time goes to a webhook, and the healthy ping is delivered while the
    first post to the silent one is still outstanding (the timeout, 60 s, never comes)."""
    silent, healthy = Endpoint(hold=True), Endpoint()
    with db.session() as s:
        silent_id = webhooks.create(s, silent.url, "admin").id
        healthy_id = webhooks.create(s, healthy.url, "admin").id
        for _ in range(4):
            webhooks.ping(s, silent_id)
        if when == "queued-before-the-pass":
            webhooks.ping(s, healthy_id)
    sender = WebhookSender(db, interval=0.05, timeout=60.0, parallel=4)
    sender.start()
    try:
        wait_for(lambda: silent.arrived >= 1, timeout=15.0)
        if when == "queued-while-it-hangs":
            with db.session() as s:
                webhooks.ping(s, healthy_id)
            sender.wake()
        wait_for(lambda: _delivered(db, healthy_id) == 1, timeout=15.0)
        # delivered while the first post to the silent endpoint was still unanswered
        assert (silent.arrived, silent.answered) == (1, 0)
        silent.release.set()
        wait_for(lambda: _delivered(db, silent_id) == 4, timeout=30.0)
    finally:
        silent.release.set()
        sender.stop()
        silent.close()
        healthy.close()
    assert silent.most_at_once == 1  # one post at a time to one webhook
    assert (silent.arrived, healthy.arrived) == (4, 1)


class Clock:
    """A clock the test moves; :func:`timing_out` moves it by a whole timeout."""

    def __init__(self, t: float) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def test_the_backoff_counts_from_when_the_attempt_ended(sqlite_db: Database) -> None:
    """A post that took the whole 10 s timeout used the 10 s backoff up: the next attempt
    came at once (the reviewer saw ~2 s, the next pass). docs/api.md: tried again 10 s
    later, then 20 s, doubling."""
    clock = Clock(5_000_000.0)
    start = clock.t

    def timing_out(request: httpx.Request) -> httpx.Response:
        clock.t += 10.0  # the endpoint said nothing for the whole timeout
        raise httpx.ReadTimeout("timed out", request=request)

    with sqlite_db.session() as s:
        hook_id = webhooks.create(s, "http://hooks.example/x", "admin", now=start).id
        webhooks.ping(s, hook_id, now=start)
    sender = WebhookSender(sqlite_db, transport=httpx.MockTransport(timing_out), clock=clock)
    try:
        assert sender.run_once() == 1
        with sqlite_db.read_session() as s:
            [tried] = webhooks.deliveries(s, hook_id)
            assert (tried.attempts, tried.next_attempt_at) == (1, start + 10 + 10)
        clock.t = start + 10 + 9.5
        assert sender.run_once() == 0  # 9.5 s after the attempt ended: not yet
        clock.t = start + 20
        assert sender.run_once() == 1
        with sqlite_db.read_session() as s:
            [tried] = webhooks.deliveries(s, hook_id)
            assert (tried.attempts, tried.next_attempt_at) == (2, start + 30 + 20)
    finally:
        sender.stop()


class Proxy:
    """A forward proxy that forwards nothing: keeps each request line it gets (``POST
    http://host/path`` for an http:// URL, ``CONNECT host:443`` for an https:// one) and
    answers a POST with 200 and a CONNECT with 403."""

    def __init__(self) -> None:
        self.seen: list[str] = []
        proxy = self

        class Handler(QuietHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers["Content-Length"]))
                proxy.seen.append(f"POST {self.path}")
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def do_CONNECT(self) -> None:
                proxy.seen.append(f"CONNECT {self.path}")
                self.send_response(403)
                self.send_header("Content-Length", "0")
                self.end_headers()
                self.close_connection = True

        self.server = serve_locally(Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.mark.parametrize(
    ("variables", "url", "through"),
    [
        # the docs: every post through HTTPS_PROXY, an http:// one too
        ({"HTTPS_PROXY": "a"}, HOOK, "a"),
        ({"https_proxy": "a"}, HOOK, "a"),
        ({"HTTPS_PROXY": "a"}, TLS_HOOK, "a"),
        # an http:// post goes through HTTP_PROXY where one is set
        ({"HTTPS_PROXY": "a", "HTTP_PROXY": "b"}, HOOK, "b"),
        ({"HTTPS_PROXY": "a", "HTTP_PROXY": "b"}, TLS_HOOK, "a"),
        # NO_PROXY: a host it names, or one in a domain it names, is posted to directly
        (
            {"HTTPS_PROXY": "a", "NO_PROXY": "other,example.invalid"},
            "http://x.example.invalid/y",
            "",
        ),
        ({"HTTPS_PROXY": "a", "no_proxy": "hooks.example.invalid"}, TLS_HOOK, ""),
        ({"HTTPS_PROXY": "a", "NO_PROXY": "*"}, HOOK, ""),
        ({"HTTPS_PROXY": "a", "NO_PROXY": "example.invalid.com"}, HOOK, "a"),
    ],
    ids=[
        "https-proxy-for-http",
        "lowercase-https-proxy",
        "https-proxy-for-https",
        "http-proxy-for-http",
        "https-proxy-still-for-https",
        "no-proxy-domain",
        "no-proxy-host-lowercase",
        "no-proxy-star",
        "no-proxy-other-domain",
    ],
)
def test_every_post_goes_through_the_proxy_the_docs_name(
    sqlite_db: Database,
    no_proxy_env: pytest.MonkeyPatch,
    variables: dict[str, str],
    url: str,
    through: str,
) -> None:
    """The host does not resolve (``.invalid``): only a proxy can take the post. The sender
    reads the variables (:func:`danlu.config.outbound_proxies`) when it is made."""
    proxies = {"a": Proxy(), "b": Proxy()}
    try:
        for name, value in variables.items():
            no_proxy_env.setenv(name, proxies[value].url if value in proxies else value)
        hook_id = _ping_once(sqlite_db, url)
    finally:
        for proxy in proxies.values():
            proxy.close()
    host = httpx.URL(url).host
    expected = f"POST {url}" if url.startswith("http:") else f"CONNECT {host}:443"
    for name, proxy in proxies.items():
        assert proxy.seen == ([expected] if name == through else []), name
    with sqlite_db.read_session() as s:
        [tried] = webhooks.deliveries(s, hook_id)
        if through and url.startswith("http:"):
            assert (tried.delivered, tried.status_code) == (True, 200)
        else:  # refused by the proxy, or no such host
            assert not tried.delivered and tried.last_error


def test_a_no_proxy_host_is_posted_to_directly(
    sqlite_db: Database, no_proxy_env: pytest.MonkeyPatch
) -> None:
    """A local endpoint NO_PROXY names gets the post itself; the proxy sees none."""
    proxy, endpoint = Proxy(), Endpoint()
    no_proxy_env.setenv("HTTPS_PROXY", proxy.url)
    no_proxy_env.setenv("NO_PROXY", "localhost, 127.0.0.1")
    try:
        hook_id = _ping_once(sqlite_db, endpoint.url)
    finally:
        proxy.close()
        endpoint.close()
    assert (endpoint.arrived, proxy.seen) == (1, [])
    assert _delivered(sqlite_db, hook_id) == 1


def test_the_proxy_settings_are_read_in_config(no_proxy_env: pytest.MonkeyPatch) -> None:
    """Lower case wins over upper case (as urllib and curl read them); an empty variable is
    unset; ALL_PROXY is the last resort for both schemes."""
    assert config.outbound_proxies() == config.OutboundProxies(http=None, https=None, no_proxy=())
    no_proxy_env.setenv("ALL_PROXY", "http://all:3128")
    assert config.outbound_proxies() == config.OutboundProxies(
        http="http://all:3128", https="http://all:3128", no_proxy=()
    )
    no_proxy_env.setenv("HTTPS_PROXY", "http://upper:3128")
    no_proxy_env.setenv("https_proxy", "http://lower:3128")
    no_proxy_env.setenv("HTTP_PROXY", "")
    no_proxy_env.setenv("NO_PROXY", " .corp , ,10.0.0.1 ")
    assert config.outbound_proxies() == config.OutboundProxies(
        http="http://lower:3128", https="http://lower:3128", no_proxy=(".corp", "10.0.0.1")
    )


@pytest.mark.parametrize(
    ("no_proxy", "direct"),
    [
        ("127.0.0.0/8", True),
        ("10.0.0.0/8", False),
        ("127.0.0.1:{port}", True),
        ("127.0.0.1:1", False),
        ("[::1],localhost", False),
    ],
    ids=["network", "other-network", "host-and-port", "other-port", "other-hosts"],
)
def test_no_proxy_entries_name_networks_and_ports(
    sqlite_db: Database, no_proxy: str, direct: bool
) -> None:
    """The proxies handed to the sender (``proxies=``), as app.py's default reads them."""
    proxy, endpoint = Proxy(), Endpoint()
    port = httpx.URL(endpoint.url).port
    entries = tuple(no_proxy.format(port=port).split(","))
    try:
        with sqlite_db.session() as s:
            hook_id = webhooks.create(s, endpoint.url, "admin").id
            webhooks.ping(s, hook_id)
        proxies = config.OutboundProxies(http=proxy.url, https=proxy.url, no_proxy=entries)
        sender = WebhookSender(sqlite_db, timeout=5.0, proxies=proxies)
        try:
            assert sender.run_once() == 1
        finally:
            sender.stop()
    finally:
        proxy.close()
        endpoint.close()
    if direct:
        assert (endpoint.arrived, proxy.seen) == (1, [])
    else:
        assert (endpoint.arrived, proxy.seen) == (0, [f"POST {endpoint.url}"])
    assert _delivered(sqlite_db, hook_id) == 1


def test_a_proxy_variable_that_is_no_proxy_url_is_refused_by_name(
    no_proxy_env: pytest.MonkeyPatch,
) -> None:
    no_proxy_env.setenv("http_proxy", "ftp://proxy.example:21")
    with pytest.raises(ConfigError, match=r"^http_proxy: 'ftp://proxy.example:21' is not a"):
        config.outbound_proxies()
    no_proxy_env.setenv("http_proxy", "proxy.example:3128")  # a bare host:port is http://
    assert config.outbound_proxies().http == "http://proxy.example:3128"


def test_one_delivery_of_a_webhook_is_claimed_at_a_time_whichever_sender_claims(
    db: Database,
) -> None:
    """Two senders sharing a store: while one posts a webhook's first due delivery, the
    other claims none of that webhook's (another webhook's, yes); once the outcome is
    written, the next one is claimable. Each claim with its own token."""
    now = 1_000_000.0
    with db.session() as s:
        busy = webhooks.create(s, "http://hooks.example/a", "admin", now=now).id
        other = webhooks.create(s, "http://hooks.example/b", "admin", now=now).id
        first = webhooks.ping(s, busy, now=now).id
        second = webhooks.ping(s, busy, now=now).id
        third = webhooks.ping(s, other, now=now).id
    with db.session() as s:
        assert webhooks.claim_due(s, "a-1", 60.0, now, 10) == [first, third]
    with db.read_session() as s:
        assert not webhooks.any_due(s, now + 1)
    with db.session() as s:
        assert webhooks.claim_due(s, "b-1", 60.0, now + 1, 10) == []
    with db.session() as s:
        assert webhooks.record(s, first, "a-1", now + 2, status_code=200, error=None)
    with db.read_session() as s:
        assert webhooks.any_due(s, now + 3)
    with db.session() as s:
        assert webhooks.claim_due(s, "b-2", 60.0, now + 3, 10) == [second]
