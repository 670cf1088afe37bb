"""A script's own metric named ``rollback`` collides with the record's rollback generation,
which the API reads from that field (docs/api.md, ``POST /jobs/{id}/metrics``): a float was
a 422 for the record, an integer was taken as a generation and hid the records of the
earlier ones. :meth:`MetricsReporter.report` refuses it at the call, naming the field and
the fix, whatever the sink; the record's own ``step`` and ``time`` are the user's to set."""

from __future__ import annotations

import json
import types
from pathlib import Path

import pytest

from danlu.core.errors import ConfigError
from danlu.train.report import MetricsReporter


def _sinks(tmp_path: Path) -> list[MetricsReporter]:
    return [
        MetricsReporter(url="http://127.0.0.1:9/api", interval_s=3600, close_timeout_s=0.1),
        MetricsReporter(path=tmp_path / "metrics.jsonl", interval_s=3600),
        MetricsReporter(),  # the do-nothing sink: the same script on a laptop
    ]


@pytest.mark.parametrize("value", [0.3, 2, 0])
def test_a_metric_named_rollback_is_refused_at_the_call(tmp_path: Path, value: float) -> None:
    for reporter in _sinks(tmp_path):
        with pytest.raises(ConfigError, match="'rollback'") as caught:
            reporter.report({"step": 3, "rollback": value, "loss": 1.0})
        assert "rename the metric" in str(caught.value)
        assert reporter.last is None  # nothing was taken
        assert reporter.seal() == []
        reporter.close()


def test_a_read_only_mapping_is_refused_too(tmp_path: Path) -> None:
    """The reporter writes any mapping (:func:`json.dumps` of ``dict(record)``): one that is
    no ``dict`` does not slip past."""
    record = types.MappingProxyType({"step": 3, "rollback": 1})
    for reporter in _sinks(tmp_path):
        with pytest.raises(ConfigError, match="'rollback'"):
            reporter.report(record)  # type: ignore[arg-type]
        reporter.close()


def test_the_other_records_still_go(tmp_path: Path) -> None:
    reporter = MetricsReporter(path=tmp_path / "metrics.jsonl", interval_s=3600)
    reporter.report({"step": 1, "loss": 1.0})
    with pytest.raises(ConfigError):
        reporter.report({"step": 2, "rollback": 0.5})
    reporter.report({"step": 2, "rollback_rate": 0.5, "time": 1_700_000_000.0})
    reporter.close()
    lines = (tmp_path / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(line) for line in lines] == [
        {"step": 1, "loss": 1.0},
        {"step": 2, "rollback_rate": 0.5, "time": 1_700_000_000.0},
    ]
