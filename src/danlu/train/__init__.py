"""``danlu.train``: the library that runs inside training jobs (needs the ``train`` extra, torch).

``ctx = danlu.train.init(model, optimizer, ...)`` returns one :class:`TrainContext` bundling
distributed helpers, batch control with OOM recovery, mixed precision, accumulation, LR control,
anomaly detection, checkpoints, preemption and metrics reporting; :func:`fit` runs the common
loop. The job environment is read only in :mod:`danlu.train.env`. See ``docs/train.md``.
"""

from __future__ import annotations

from danlu.train.anomaly import AnomalyDetector, TrainingAnomalyError
from danlu.train.batch import AdaptiveBatch, BatchController, GradientNoiseScale, PowerSchedule
from danlu.train.build import init
from danlu.train.context import TrainContext
from danlu.train.data import ElasticSampler, LocalBatch
from danlu.train.distributed import ConsistencyError, Distributed, parameter_hash
from danlu.train.env import PREEMPTED_EXIT_CODE, JobEnv
from danlu.train.fit import fit
from danlu.train.lr import LRController
from danlu.train.oom import inject_oom_at
from danlu.train.step import StepResult

__all__ = [
    "PREEMPTED_EXIT_CODE",
    "AdaptiveBatch",
    "AnomalyDetector",
    "BatchController",
    "ConsistencyError",
    "Distributed",
    "ElasticSampler",
    "GradientNoiseScale",
    "JobEnv",
    "LRController",
    "LocalBatch",
    "PowerSchedule",
    "StepResult",
    "TrainContext",
    "TrainingAnomalyError",
    "fit",
    "init",
    "inject_oom_at",
    "parameter_hash",
]
