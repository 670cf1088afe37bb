"""Pure domain types: job spec, job, states and their one transition table, GPUs, nodes,
topology, allocations and errors. Imports nothing else of danlu."""

from danlu.core.cluster import (
    GPU_TYPES,
    MILLI_PER_GPU,
    Allocation,
    Cluster,
    GpuShare,
    GpuType,
    Node,
    gpu_type,
)
from danlu.core.errors import (
    ConfigError,
    DanluError,
    DataError,
    InvalidTransitionError,
    PlacementError,
    SpecError,
    UnknownNameError,
    UnschedulableError,
)
from danlu.core.job import Job
from danlu.core.spec import JobSpec, load_spec, loads_spec, parse_spec
from danlu.core.state import TRANSITIONS, Event, JobState, transition

__all__ = [
    "GPU_TYPES",
    "MILLI_PER_GPU",
    "TRANSITIONS",
    "Allocation",
    "Cluster",
    "ConfigError",
    "DanluError",
    "DataError",
    "Event",
    "GpuShare",
    "GpuType",
    "InvalidTransitionError",
    "Job",
    "JobSpec",
    "JobState",
    "Node",
    "PlacementError",
    "SpecError",
    "UnknownNameError",
    "UnschedulableError",
    "gpu_type",
    "load_spec",
    "loads_spec",
    "parse_spec",
    "transition",
]
