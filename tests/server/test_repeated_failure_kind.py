"""A failure that repeats while naming what changes from pass to pass (a job's id, a count)
is logged in full once, then counted; one with another message is logged in full again."""

from __future__ import annotations

import logging

import pytest

from danlu.server.failures import RepeatedFailure, failure_kind


def _raise(exc: Exception, failures: RepeatedFailure) -> str:
    try:
        raise exc
    except Exception as caught:
        return failures.failed(caught)


def test_a_failure_naming_another_job_each_pass_is_logged_in_full_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    log = logging.getLogger("danlu.test.repeated")
    failures = RepeatedFailure(log, "policy 'danlu'", "policy 'danlu' works again", quiet_s=0.0)
    with caplog.at_level(logging.WARNING, logger=log.name):
        _raise(KeyError("job 3f9c2e1b0d4a has no options"), failures)
        _raise(KeyError("job 77ab21c9e0f3 has no options"), failures)
        _raise(KeyError("job 0d4a3f9c2e1b has no options"), failures)
    full = [r for r in caplog.records if r.exc_info is not None]
    counted = [r.getMessage() for r in caplog.records if r.exc_info is None]
    assert len(full) == 1, [r.getMessage() for r in caplog.records]
    assert counted[-1] == (
        "policy 'danlu' failed 1 more times: KeyError: 'job 0d4a3f9c2e1b has no options'"
    )


def test_another_message_is_logged_in_full_again(caplog: pytest.LogCaptureFixture) -> None:
    log = logging.getLogger("danlu.test.repeated2")
    failures = RepeatedFailure(log, "reconcile pass", "reconcile passes work again")
    with caplog.at_level(logging.WARNING, logger=log.name):
        _raise(OSError(28, "No space left on device"), failures)
        _raise(OSError(13, "Permission denied"), failures)
        _raise(ValueError("No space left on device"), failures)
    assert sum(r.exc_info is not None for r in caplog.records) == 3


def test_the_kind_masks_ids_and_numbers_but_not_words() -> None:
    assert failure_kind("KeyError: 'job 3f9c2e1b0d4a' after 12.5 s") == (
        "KeyError: 'job #' after # s"
    )
    assert failure_kind("ValueError: deadbeef facade") == "ValueError: deadbeef facade"
