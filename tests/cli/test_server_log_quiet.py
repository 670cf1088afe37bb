"""The control plane's log set-up (`danlu up`) keeps a webhook URL's password out of the log."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import httpx
import pytest

from danlu.cli.server import QUIET_LOGGERS, configure_logging


@pytest.fixture
def restored_levels() -> Iterator[None]:
    loggers = [logging.getLogger(name) for name in (*QUIET_LOGGERS, "danlu.server")]
    levels = [logger.level for logger in loggers]
    yield
    for logger, level in zip(loggers, levels, strict=True):
        logger.setLevel(level)


def test_a_webhook_post_s_url_and_password_stay_out_of_the_log(
    restored_levels: None, caplog: pytest.LogCaptureFixture
) -> None:
    """httpx logs every request's URL at INFO, a webhook's ``user:password@`` with it."""
    configure_logging()
    caplog.set_level(logging.INFO)  # the root's level, as `danlu up` has it
    transport = httpx.MockTransport(lambda request: httpx.Response(200))
    with httpx.Client(transport=transport) as client:
        client.post("http://hookuser:s3cretpw@127.0.0.1:9/hook", content=b"{}")
    logging.getLogger("danlu.server.webhook_sender").info("still logged")
    assert "s3cretpw" not in caplog.text
    assert "still logged" in caplog.text
