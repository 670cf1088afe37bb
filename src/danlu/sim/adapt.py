"""A simulated job's in-process batch adaptation: :class:`danlu.estimate.adapt.SelfTuner`
(the code ``danlu.train``'s goodput-adaptive batch runs) with the limits of a profile."""

from __future__ import annotations

from danlu.estimate.adapt import BatchLimits, SelfTuner
from danlu.sim.elastic import ApplicationProfile


def profile_tuner(profile: ApplicationProfile) -> SelfTuner:
    """A tuner that knows nothing yet, with the job's limits: the profile's batch range and
    its micro-batch range (what the job's own configuration and memory model give it)."""
    return SelfTuner(
        BatchLimits(
            init_batch=profile.init_batch_size,
            max_batch=profile.max_batch_size,
            min_local=profile.min_local_bsz,
            max_local=profile.max_local_bsz,
        )
    )
