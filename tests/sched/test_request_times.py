"""A job request's submission time must be a finite number: NaN compares false with every
time, so the queues sorted by it (value-density's ranks, the waited times of danlu's aging)
were in an undefined order."""

from __future__ import annotations

import math

import pytest

from danlu.core.errors import ConfigError
from danlu.sched.view import JobRequest, JobStatus


@pytest.mark.parametrize("when", [math.nan, math.inf, -math.inf])
def test_a_submit_time_that_is_no_finite_number_is_refused(when: float) -> None:
    with pytest.raises(ConfigError, match=r"JobRequest 'j': submit_time .* finite"):
        JobStatus(JobRequest(id="j", submit_time=when))


@pytest.mark.parametrize("when", [0.0, -5.0, 1.7e9, 3])
def test_finite_submit_times_are_accepted(when: float) -> None:
    assert JobRequest(id="j", submit_time=when).submit_time == when
