"""A job as the control plane and the simulator track it: spec + state + history."""

from __future__ import annotations

from dataclasses import dataclass, field

from danlu.core.cluster import Allocation
from danlu.core.spec import JobSpec
from danlu.core.state import Event, JobState, transition


@dataclass
class Job:
    """Mutable record of one job. Change ``state`` only through :meth:`move`."""

    id: str
    spec: JobSpec
    submit_time: float
    state: JobState = JobState.PENDING
    allocation: Allocation = field(default_factory=Allocation)
    restarts: int = 0
    preemptions: int = 0
    start_time: float | None = None
    """First time the job started running."""
    end_time: float | None = None
    events: list[Event] = field(default_factory=list)

    def move(self, new: JobState | str, reason: str, time: float) -> Event:
        """Apply one allowed state change, record the event, and return it."""
        event = transition(self, new, reason, time)
        self.events.append(event)
        if event.new is JobState.RUNNING and self.start_time is None:
            self.start_time = time
        if event.new.terminal:
            self.end_time = time
        return event

    @property
    def jct(self) -> float | None:
        """Job completion time (end minus submission) once terminal."""
        return None if self.end_time is None else self.end_time - self.submit_time
