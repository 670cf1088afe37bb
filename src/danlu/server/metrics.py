"""Prometheus metrics of one server: DCGM-named GPU gauges and danlu's job and queue metrics.

Every app has its own :class:`~prometheus_client.CollectorRegistry` (never the global one).
Gauges derived from the store are computed at scrape time by a custom collector (one read
transaction per scrape); the scheduling-round histogram is observed by the reconcile loop.
"""

from __future__ import annotations

import logging
import time
from collections import Counter as Tally
from collections.abc import Iterator, Mapping
from typing import Final

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from sqlalchemy import func, select

from danlu.core.cluster import MILLI_PER_GPU, Allocation, Cluster, GpuShare
from danlu.core.state import JobState
from danlu.devices import METRICS, Inventory, inventory_from_cluster, sample_metrics
from danlu.devices.inventory import GpuKey
from danlu.devices.metrics import ENERGY_METRIC, gpu_labels
from danlu.sched.quota import Usage
from danlu.server.db import Database, Gpu, Job, Node, Project, User
from danlu.server.services import usage, user_quotas, webhooks
from danlu.server.services.cluster import ABSENT, list_shares
from danlu.server.services.nodes import STATES as NODE_STATES
from danlu.server.services.nodes import state as node_state
from danlu.server.services.projects import HOLDING

log = logging.getLogger(__name__)
DCGM_LABELS = ("gpu", "UUID", "device", "modelName", "Hostname")


def _project_metrics(
    names: list[str],
    held: dict[str, Usage],
    limits: dict[str, tuple[float | None, int | None]],
    weights: dict[str, float],
    recent: dict[str, float] | None,
) -> Iterator[Metric]:
    """What each project's running jobs hold, its quota where it has one, its fair-share
    weight, and (``recent``: when the policy keeps a history) its recent usage in GPUs."""
    gpus = GaugeMetricFamily(
        "danlu_project_gpus_allocated",
        "GPUs held by a project's running jobs (whole-GPU equivalents).",
        labels=["project"],
    )
    memory = GaugeMetricFamily(
        "danlu_project_gpu_memory_allocated_bytes",
        "GPU memory held by a project's running jobs.",
        labels=["project"],
    )
    quota_gpus = GaugeMetricFamily(
        "danlu_project_quota_gpus", "A project's GPU quota (projects with one).", labels=["project"]
    )
    quota_memory = GaugeMetricFamily(
        "danlu_project_quota_gpu_memory_bytes",
        "A project's GPU memory quota (projects with one).",
        labels=["project"],
    )
    share = GaugeMetricFamily(
        "danlu_project_share", "A project's weight in the fair-share policy.", labels=["project"]
    )
    recent_gpus = GaugeMetricFamily(
        "danlu_project_recent_gpus",
        "A project's recent usage in GPUs (the decayed average the fair-share policy's "
        "half_life weighs); only with a policy that keeps a history.",
        labels=["project"],
    )
    for name in names:
        holding = held.get(name, Usage())
        share.add_metric([name], weights.get(name, 1.0))
        if recent is not None:
            recent_gpus.add_metric([name], recent.get(name, 0.0))
        gpus.add_metric([name], holding.gpus)
        memory.add_metric([name], float(holding.gpu_memory))
        limit_gpus, limit_memory = limits.get(name, (None, None))
        if limit_gpus is not None:
            quota_gpus.add_metric([name], float(limit_gpus))
        if limit_memory is not None:
            quota_memory.add_metric([name], float(limit_memory))
    yield from (gpus, memory, quota_gpus, quota_memory, share)
    if recent is not None:
        yield recent_gpus


def _user_metrics(
    shares: list[tuple[str, int, int, int, str]],
    holders: dict[str, str],
    limits: dict[str, float],
) -> Iterator[Metric]:
    """The GPUs each user's running jobs hold (users holding some, or with a quota) and the
    users' own GPU quotas."""
    held: dict[str, float] = dict.fromkeys(limits, 0.0)
    for _, _, milli, _, job_id in shares:
        name = holders.get(job_id)
        if name is not None:
            held[name] = held.get(name, 0.0) + milli / MILLI_PER_GPU
    gpus = GaugeMetricFamily(
        "danlu_user_gpus_allocated",
        "GPUs held by a user's running jobs, in all projects (whole-GPU equivalents).",
        labels=["user"],
    )
    for name in sorted(held):
        gpus.add_metric([name], held[name])
    yield gpus
    quota = GaugeMetricFamily(
        "danlu_user_quota_gpus", "A user's own GPU quota (users with one).", labels=["user"]
    )
    for name in sorted(limits):
        quota.add_metric([name], limits[name])
    yield quota


class _StoreCollector(Collector):
    """Reads the store (and the GPUs) at every scrape."""

    def __init__(self, db: Database, inventory: Inventory) -> None:
        self.db = db
        self.inventory = inventory
        self.usage_half_life = 0.0
        """The half-life of the projects' recent usage the policy reads (0: none)."""
        self.energy: Mapping[GpuKey, float] = {}
        """The energy meter's last reading: joules by ``(node, gpu)`` (empty: no meter)."""

    def _allocations(self, shares: list[tuple[str, int, int, int, str]]) -> list[Allocation]:
        index = {n.name: i for i, n in enumerate(self.inventory.nodes)}
        by_job: dict[str, list[GpuShare]] = {}
        for node, gpu, milli, memory, job_id in shares:
            if node in index:
                by_job.setdefault(job_id, []).append(GpuShare(index[node], gpu, milli, memory))
        return [Allocation(tuple(s)) for s in by_job.values()]

    def collect(self) -> Iterator[Metric]:
        try:
            with self.db.read_session() as session:
                states = dict(
                    session.execute(select(Job.state, func.count()).group_by(Job.state)).all()
                )
                queue = dict(
                    session.execute(
                        select(Project.name, func.count(Job.seq))
                        .join(Job, Job.project_id == Project.id)
                        .where(Job.state == JobState.PENDING.value)
                        .group_by(Project.name)
                    ).all()
                )
                limits: dict[str, tuple[float | None, int | None]] = {}
                weights: dict[str, float] = {}
                for name, gpus, memory, share in session.execute(
                    select(
                        Project.name, Project.quota_gpus, Project.quota_gpu_memory, Project.share
                    )
                ):
                    limits[name], weights[name] = (gpus, memory), share
                recent = None
                if self.usage_half_life > 0:
                    standing = usage.standing(session, time.time(), self.usage_half_life)
                    recent = {name: s.recent_gpus or 0.0 for name, s in standing.items()}
                projects = list(limits)
                owners: dict[str, str] = {}
                holders: dict[str, str] = {}  # job -> its user's name
                for job_id, name, user_name in session.execute(
                    select(Job.id, Project.name, User.name)
                    .join(Project, Job.project_id == Project.id)
                    .join(User, Job.user_id == User.id)
                    .where(Job.state.in_(HOLDING))
                ):
                    owners[job_id], holders[job_id] = name, user_name
                user_limits = {q.name: q.gpus for q in user_quotas.read_quotas(session).values()}
                restarts, preemptions = session.execute(
                    select(
                        func.coalesce(func.sum(Job.restarts), 0),
                        func.coalesce(func.sum(Job.preemptions), 0),
                    )
                ).one()
                shares = [
                    (s.node, s.gpu, s.milli, s.memory, s.job_id) for s in list_shares(session)
                ]
                here = select(Node).where(Node.position != ABSENT)  # not those gone a while
                node_states = Tally(map(node_state, session.scalars(here)))
                closed = select(Gpu).where(Gpu.cordoned_at.is_not(None), Gpu.memory != ABSENT)
                gpu_states = Tally(map(node_state, session.scalars(closed)))
                hooks = {h.seq: h.id for h in webhooks.list_webhooks(session)}
                deliveries = webhooks.counts(session)
        except Exception as exc:  # a scrape must never take the server down
            log.warning("metrics: cannot read the store: %s", exc)
            return
        jobs = GaugeMetricFamily("danlu_jobs", "Jobs by state.", labels=["state"])
        for state in JobState:
            jobs.add_metric([state.value], float(states.get(state.value, 0)))
        yield jobs
        length = GaugeMetricFamily(
            "danlu_queue_length", "Pending jobs per project.", labels=["project"]
        )
        for name in sorted(set(projects) | set(queue)):
            length.add_metric([name], float(queue.get(name, 0)))
        yield length
        held: dict[str, Usage] = {}  # by project, from the shares read above
        for _, _, milli, memory, job_id in shares:
            owner = owners.get(job_id)
            if owner is not None:
                held[owner] = held.get(owner, Usage()) + Usage(milli / MILLI_PER_GPU, memory)
        names = sorted(set(projects) | set(held))
        yield from _project_metrics(names, held, limits, weights, recent)
        yield from _user_metrics(shares, holders, user_limits)
        allocated = sum(milli for _, _, milli, _, _ in shares) / MILLI_PER_GPU
        yield GaugeMetricFamily(
            "danlu_gpus_allocated", "GPUs allocated (whole-GPU equivalents).", value=allocated
        )
        yield GaugeMetricFamily(
            "danlu_gpu_memory_allocated_bytes",
            "GPU memory allocated to running jobs.",
            value=float(sum(memory for _, _, _, memory, _ in shares)),
        )
        by_state = GaugeMetricFamily(
            "danlu_nodes",
            "Nodes by state (ready; cordoned or draining: closed to new work).",
            labels=["state"],
        )
        for name in NODE_STATES:
            by_state.add_metric([name], float(node_states.get(name, 0)))
        yield by_state
        total = sum(len(n.gpus) for n in self.inventory.nodes)
        yield GaugeMetricFamily("danlu_gpus", "GPUs in the inventory.", value=float(total))
        closed_gpus = GaugeMetricFamily(
            "danlu_gpus_closed",
            "GPUs closed to new work on their own (by an admin or the health check), by state.",
            labels=["state"],
        )
        for name in NODE_STATES[1:]:
            closed_gpus.add_metric([name], float(gpu_states.get(name, 0)))
        yield closed_gpus
        yield CounterMetricFamily(
            "danlu_job_restarts", "Restarts after failures, all jobs.", value=float(restarts)
        )
        yield CounterMetricFamily(
            "danlu_job_preemptions", "Preemptions, all jobs.", value=float(preemptions)
        )
        outcomes = GaugeMetricFamily(
            "danlu_webhook_deliveries",
            "Webhook deliveries kept (7 days once done), by webhook and outcome.",
            labels=["webhook", "outcome"],
        )
        for seq, hook_id in hooks.items():
            tally = deliveries.get(seq, webhooks.Counts())
            for outcome in ("pending", "delivered", "failed"):
                outcomes.add_metric([hook_id, outcome], float(getattr(tally, outcome)))
        yield outcomes
        yield from self._gpu_metrics(shares)
        yield from self._energy_metrics()  # the meter's reading, even when sampling fails

    def _gpu_metrics(self, shares: list[tuple[str, int, int, int, str]]) -> Iterator[Metric]:
        try:
            samples = sample_metrics(self.inventory, self._allocations(shares))
        except Exception as exc:  # NVML can fail at any time; the rest of /metrics still works
            log.warning("metrics: cannot sample the GPUs: %s", exc)
            return
        if not samples:  # a cluster's GPUs (Slurm's, Ray's): this host cannot read them
            return
        families = {
            name: GaugeMetricFamily(name, help_text, labels=list(DCGM_LABELS))
            for name, help_text in METRICS.items()
        }
        for sample in samples:
            family = families.get(sample.name)
            if family is not None:
                family.add_metric([sample.labels[k] for k in DCGM_LABELS], sample.value)
        yield from families.values()

    def _energy_metrics(self) -> Iterator[Metric]:
        reading = self.energy
        if not reading:
            return
        family = GaugeMetricFamily(
            ENERGY_METRIC,
            "Total energy consumption since the control plane's meter started (in mJ).",
            labels=list(DCGM_LABELS),
        )
        for node in self.inventory.nodes:
            for position, gpu in enumerate(node.gpus):
                joules = reading.get((node.name, position))
                if joules is not None:
                    labels = gpu_labels(gpu, node.hostname)
                    family.add_metric([labels[k] for k in DCGM_LABELS], joules * 1000.0)
        yield family


RUN_LOSS_CAUSES: Final = ("node", "gpu")
"""The ``cause`` labels of ``danlu_runs_lost_total``."""
RECONCILE_ERROR_STEPS: Final = (
    "poll",
    "stop",
    "settle",
    "launch",
    "preempt",
    "schedule",
    "policy",
    "purge",
    "expire",
    "dependencies",
    "sweep",
    "other",
)
"""The ``step`` labels of ``danlu_reconcile_errors_total``: the first word of each error a
reconcile pass reports (``"purge JOB: ..."``); ``other`` for any other."""


class ServerMetrics:
    """The registry of one server and the instruments the reconcile loop observes."""

    def __init__(self, db: Database, inventory: Inventory) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self.round_seconds = Histogram(
            "danlu_scheduling_round_seconds",
            "Wall time of one scheduling round (snapshot, policy, plan recorded).",
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0),
            registry=self.registry,
        )
        self.reconcile_seconds = Histogram(
            "danlu_reconcile_seconds",
            "Wall time of one whole reconcile pass (poll, schedule, launch).",
            registry=self.registry,
        )
        self.policy_failures = Counter(
            "danlu_policy_failures_total",
            "Scheduling rounds whose policy raised; each ran the fallback policy (fifo).",
            registry=self.registry,
        )
        self.runs_lost = Counter(
            "danlu_runs_lost_total",
            "Runs lost without the job's fault (a running job resumes from its last "
            "checkpoint with no restart counted): cause=node (lost with its node), cause=gpu "
            "(failed on a GPU the health check found faulty).",
            ["cause"],
            registry=self.registry,
        )
        for cause in RUN_LOSS_CAUSES:  # each series from 0, so that a rate() sees the first
            self.runs_lost.labels(cause)
        self.reconcile_errors = Counter(
            "danlu_reconcile_errors_total",
            "Errors a reconcile pass met and went on from, by step: a run it could not poll "
            "or stop, an exit it could not settle, a launch or preemption that failed, a "
            "policy that raised, a finished job's files the retention could not delete "
            "(purge). Each is logged, a recurring one at most once an hour.",
            ["step"],
            registry=self.registry,
        )
        for step in RECONCILE_ERROR_STEPS:
            self.reconcile_errors.labels(step)
        self._store = _StoreCollector(db, inventory)
        self.registry.register(self._store)

    def count_reconcile_error(self, error: str) -> None:
        """Count one error a reconcile pass reported, under its step (its first word)."""
        step = error.split(maxsplit=1)[0].rstrip(":") if error.strip() else ""
        self.reconcile_errors.labels(step if step in RECONCILE_ERROR_STEPS else "other").inc()

    def set_usage_half_life(self, half_life: float) -> None:
        """Report the projects' recent usage with this half-life (the policy's; 0: not)."""
        self._store.usage_half_life = half_life

    def set_energy(self, reading: Mapping[GpuKey, float]) -> None:
        """The energy meter's latest reading (joules by GPU since it started), exported as
        DCGM's energy counter."""
        self._store.energy = dict(reading)

    def set_cluster(self, cluster: Cluster) -> None:
        """The executor's nodes changed (:mod:`danlu.server.inventory`): count and sample
        the GPUs of ``cluster`` from now on."""
        source = self._store.inventory.source
        self._store.inventory = inventory_from_cluster(cluster, source)

    def exposition(self) -> bytes:
        """The text exposition format of every metric."""
        return generate_latest(self.registry)
