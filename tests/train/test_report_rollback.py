"""After an in-process rollback (:meth:`MetricsReporter.rewind`) the records reported carry
``rollback``, their generation (1, after a second rollback 2, ...), so that the API hides
the first try's records of the steps the replay redoes within one attempt (a JSONL file is
cut back instead); a run resumed from a checkpoint sealed after a rollback goes on with that
generation."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from danlu.train.report import MetricsReporter


def _api() -> MetricsReporter:
    return MetricsReporter(url="http://127.0.0.1:9/api", interval_s=3600, close_timeout_s=0.1)


def _queued(reporter: MetricsReporter) -> list[dict[str, Any]]:
    return [json.loads(line) for request in reporter.seal() for line in request["lines"]]


def test_the_records_after_a_rollback_carry_its_generation() -> None:
    reporter = _api()
    first = {"step": 4, "loss": 1.0}
    reporter.report(first)
    assert reporter.rewind(3) == 0  # sent to the API: none dropped
    replayed = {"step": 4, "loss": 0.5}
    reporter.report(replayed)
    reporter.rewind(3)
    reporter.report({"step": 4, "loss": 0.25})
    assert _queued(reporter) == [
        {"step": 4, "loss": 1.0},
        {"step": 4, "loss": 0.5, "rollback": 1},
        {"step": 4, "loss": 0.25, "rollback": 2},
    ]
    assert replayed == {"step": 4, "loss": 0.5}  # the caller's record is left as it was
    assert reporter.last is not None and "rollback" not in reporter.last


def test_a_record_that_is_not_a_dict_still_never_raises_after_a_rollback() -> None:
    reporter = _api()
    reporter.rewind(0)
    reporter.report([1, 2])  # type: ignore[arg-type]
    assert _queued(reporter) == []  # left out as before: it cannot be sent
    assert reporter.dropped == 1


def test_a_resumed_run_goes_on_with_the_generation_its_checkpoint_sealed() -> None:
    before = _api()
    before.report({"step": 1})
    before.rewind(0)
    before.report({"step": 1})
    pending = before.seal()
    after = _api()
    assert after.resend(pending, 1) == 2
    after.report({"step": 2})
    assert _queued(after)[-1] == {"step": 2, "rollback": 1}
    after.rewind(1)
    after.report({"step": 2})
    assert _queued(after)[-1] == {"step": 2, "rollback": 2}


def test_a_metrics_file_is_cut_back_instead(tmp_path: Path) -> None:
    path = tmp_path / "m.jsonl"
    reporter = MetricsReporter(path=path, interval_s=3600)
    reporter.report({"step": 1})
    reporter.report({"step": 2})
    reporter.flush()
    reporter.rewind(1)
    reporter.report({"step": 2})
    reporter.close()
    assert [json.loads(line) for line in path.read_text().splitlines()] == [
        {"step": 1},
        {"step": 2},  # the replay's: the first try's was cut
    ]
    assert reporter.rollback == 1
