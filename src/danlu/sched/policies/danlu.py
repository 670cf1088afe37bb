"""danlu's own policy: co-adapt every job's GPU count, placement and batch size to cut the
average job completion time while keeping the cluster's goodput high.

Each round, for every job, the policy predicts its remaining time ``T(n)`` on ``n`` GPUs at
the best batch size there (the online model of :mod:`danlu_model`: throughput fitted from
the step times the job measured, statistical efficiency from its gradient statistics,
remaining work from the progress it reported). The GPU counts come from an elastic
shortest-remaining-time-first walk: jobs in rank order (shortest ``T`` first) each take the
size that minimises ``T(n) * (1 + delay(n))``, the delay it causes the jobs ranked behind
it (``alloc = "shares"``, :func:`danlu_shares.share_walk`: heSRPT's shares; ``"walk"``,
:func:`danlu_alloc.walk`: a linear price, jobs behind per cluster GPU) -- short jobs run
first at efficient sizes, the last-ranked (long) job soaks up what is left.

- Restarts are priced: any option other than keeping the current allocation and batch adds
  ``restart_cost`` to ``T``; keeping gets a ``hysteresis`` discount; a running job ranks as
  if ``rank_hysteresis`` shorter; a job (re)started less than ``min_hold * (1 + moves /
  move_slack)`` seconds ago is neither shrunk nor preempted (it may grow after ``grow_after``;
  one whose measured time is ``regret`` times its best option's may take any size); after
  ``max_moves`` moves it is never preempted, and shrunk only past its hold while jobs wait
  (``shrink_stuck``); at most ``move_budget`` jobs past their hold (the last-ranked) are
  open to a move in one round. docs/danlu-policy-details.md, "No thrashing", has the
  restart counts.
- Fairness: ``w = 1 + waited / aging`` grows with the time a job waited, and a job waiting
  ``starve_after`` seconds is started first (at its smallest size): no job starves (while
  jobs in their hold keep it from fitting, the GPUs left free are kept for it). A job so
  started is held ``starve_hold`` seconds, and the jobs within that hold take at most
  ``starve_share`` of the cluster, promoted a tenth of it per tenth of the hold
  (longest-starving first), so a backlog of starving jobs is started a slice at a time,
  each for a run worth its restart, not in one wave nor in runs of a few minutes. A
  starving shared request counts as one GPU: the walk leaves a GPU free for it.
- Jobs that report no batch limits are rigid: their requested GPUs, ``T`` from their
  ``expected_duration`` (else ``new_job_seconds``). Jobs never measured start at their
  requested size capped at one node (the user's tuned configuration) and the model explores,
  growing at most to ``grow_factor`` times the replicas measured so far.
- Batch size and learning rate: the chosen global batch goes in the Start/Resize; the marks
  record it (``danlu.batch``) and the AdaScale learning-rate factor it implies
  (``danlu.lr_factor`` = gain(batch), applied to the LR tuned at ``init_batch``;
  ``danlu.lr_rule`` = 3, the index of ``adascale`` in :class:`danlu.estimate.lr.LRScaling`).
- Shared (fractional) requests are placed by :mod:`danlu_share`: on a GPU already in use only
  when the interference model (calibrated on Gavel's co-location measurements) predicts a
  gain, else on an empty GPU.

Pure and deterministic: state lives in the job marks; the memo is a transparent cache.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from itertools import compress, repeat
from operator import attrgetter, is_
from typing import ClassVar

import numpy as np
import numpy.typing as npt

from danlu.core.errors import ConfigError
from danlu.sched.placement.packing_memo import PackingMemo
from danlu.sched.policies import danlu_loan as dl
from danlu.sched.policies import danlu_model as dm
from danlu.sched.policies.base import nothing_to_size, split_running
from danlu.sched.policies.danlu_alloc import Option, walk
from danlu.sched.policies.danlu_entries import (
    NO_RUNNING,
    NO_WAITING,
    EntryCache,
    RunningEntry,
    WaitingEntry,
)
from danlu.sched.policies.danlu_holds import (
    StarveRule,
    promoted_until,
    promotion_holds,
    starving_jobs,
    starving_reserve,
)
from danlu.sched.policies.danlu_hosts import FamilyHosts
from danlu.sched.policies.danlu_knobs import KNOB_RANGES
from danlu.sched.policies.danlu_options import (
    expected_seconds,
    explorers,
    gpu_counts,
    gpu_range,
    regrets,
    waiting_since,
)
from danlu.sched.policies.danlu_place import (
    GREW_FROM,
    PROMOTED,
    PlaceKnobs,
    is_adaptive,
    keep_unused,
    mark_stopped,
    place_plan,
)
from danlu.sched.policies.danlu_running import RunningKnobs, running_entry, running_ranks
from danlu.sched.policies.danlu_share import MIN_GAIN, gpus_unavailable, place_shared
from danlu.sched.policies.danlu_shares import share_walk
from danlu.sched.policies.options import OptionRange, check_options
from danlu.sched.policies.waiting import beyond_batch_limits, beyond_reach
from danlu.sched.policies.work_estimate import WORK, estimate_work
from danlu.sched.view import (
    ClusterView,
    JobStatus,
    Plan,
)

FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True)
class DanluPolicy:
    """Goodput- and JCT-driven elastic scheduling (see the module docstring)."""

    sizes_jobs: ClassVar[bool] = True
    """It chooses every adaptive job's GPU count (see :class:`~.base.Policy`)."""
    option_ranges: ClassVar[Mapping[str, OptionRange]] = KNOB_RANGES
    """The numeric knobs' valid ranges, checked when the policy is built."""
    restart_cost: float = 30.0
    """Seconds a (re)allocation costs the job (the executor's checkpoint-restore time)."""
    hysteresis: float = 0.1
    """Bonus on the value of keeping a running job as it is."""
    min_hold: float = 200.0
    """Seconds after a (re)start during which a job is not preempted (nor shrunk, unless
    it ``regret``s its size)."""
    move_slack: float = 5.0
    """Each preemption or resize lengthens a job's hold by ``min_hold / move_slack``: a job
    moved often is held ever longer (the ``regret`` release and lent GPUs going back are
    not held off)."""
    max_moves: int = 20
    """Preemptions and resizes after which a job is held for good: never preempted, unless
    it ``regret``s its size (then released); it may grow into GPUs nobody takes."""
    shrink_stuck: bool = True
    """Held for good, a job past its hold is still shrunk (to its smallest option at the
    least) while jobs wait; off, it is not shrunk but to give back GPUs it was lent."""
    rank_hysteresis: float = 0.5
    """A running job ranks as if its remaining time were this much shorter: a waiting job
    displaces it only when clearly shorter (no flip-flop between similar jobs)."""
    price_scale: float = 1.0
    """Multiplies the walk's GPU price (jobs behind / cluster GPUs): above 1 keeps jobs at
    more efficient (smaller) sizes, below 1 lets them spread wider."""
    regret: float = 1.5
    """A held job is released when its measured remaining time is this many times the best
    option's (a move that measured far worse than the model predicted is undone early):
    it may then move to any size, down to its smallest, but is not preempted."""
    width: float = 3.0
    """How much a job's width counts in its rank: ``min_n T(n) * (1 + width * n / C)``."""
    grow_after: float = 60.0
    """Seconds after a (re)start before a held job may grow into GPUs nobody takes."""
    aging: float = 7200.0
    """Seconds of waiting that add 1 to a job's weight (1 at submission)."""
    starve_after: float = 7200.0
    """A job waiting this long (since submission or its last run) is started first."""
    starve_share: float = 0.05
    """Share of the capacity that starving jobs are promoted onto (at their smallest size,
    longest-starving first): what jobs it started still hold within their ``starve_hold``
    counts against it, and a round's promotions fill the rest, at most a tenth of the share
    within any tenth of the hold (``STARVE_SLICES``; at least one job when none was
    promoted that recently). A backlog of starving jobs is started a slice at a time, and
    their holds end spread out, not in waves."""
    starve_hold: float = 1800.0
    """Seconds a job started by the starvation rule is neither shrunk nor preempted (its
    ordinary hold, if longer, still applies). Under a backlog it cannot serve, the rule
    gives each starving job in turn a run this long: not a run of ``min_hold`` that costs
    it a restart every few minutes. 0: the ordinary hold, and ``starve_share`` is per
    round."""
    move_budget: int = 64
    """Most running jobs past their hold open to a preemption or resize in one round (the
    ones ranked last by their expected remaining time; the others are held for the round,
    though a ``regret`` release or lent GPUs going back still move them, and the jobs
    ``shrink_stuck`` shrinks are not counted). It bounds a round's checkpoint storm, and its
    cost to the control plane, when the policy disagrees with much of what runs (a restart
    under new knobs, a state another policy made): the reshuffle is spread over rounds.
    0: no bound."""
    new_job_seconds: float = 600.0
    """Remaining time assumed for a job with no estimate."""
    placement: str = "best-fit"
    spread_shares: bool = True
    """A shared request goes on a GPU of its own while one is free and no whole-GPU job is
    left waiting in the round; only when none is free does it go beside other jobs (where
    the interference model predicts a gain). Off: best fit packs it beside them at once.
    Sharing slows both jobs (~40 % each, Gavel's median pair): a free GPU is better."""
    share_min_gain: float = MIN_GAIN
    """Predicted gain (combined normalised throughput above 1) a pair of jobs must reach
    for a shared request to go beside another job."""
    share_min_rate: float = 0.3
    """Predicted share of its own speed each job of a pair must keep for a shared request
    to go beside another job (0: the combined gain alone decides). 0.3 turns away a
    recommendation model beside a small CNN (it keeps 7 %), the one pair the gain passes
    that this closes; ``benchmarks/sharing_interference.py`` compares it with 0."""
    name: str = "danlu"
    explore_after: float = 0.0
    """A job with at least this many seconds left explores bigger sizes optimistically."""
    first_gpus: int = 0
    """Most GPUs of an elastic job's first start (never measured); 0: one node."""
    grow_factor: float = 3.0
    """A job grows to at most this many times the replicas it was measured at."""
    lend: bool = True
    """GPUs a held job grew into are lent: while jobs wait, it may be shrunk back to the
    size it had before it grew (it keeps them when nobody ranked ahead of it takes them)."""
    spare_gain: float = 0.05
    """A job that holds GPUs grows into GPUs nobody took only when that cuts its cost by this
    fraction more than ``hysteresis`` asks (they are lent: two restarts to take them back)."""
    alloc: str = "shares"
    """GPU counts: ``walk`` (:func:`danlu_alloc.walk`, linear GPU price) or ``shares``
    (:func:`danlu_shares.share_walk`, heSRPT's delay of the jobs behind)."""
    share_p_max: float = 0.65
    """``shares``: the largest speed-up exponent read off a job's options."""
    flat_sync: bool = False
    """Inter-node sync held beyond the replicas measured (``danlu_model.build``)."""
    packed_sync: bool = True
    """Sync measured on more nodes than the GPUs need is kept off the inter-node line
    (``danlu_model.remembered``): a line through small split placements climbs steeply."""
    share_measured: bool = False
    """``shares``: read a job's exponent off its measured sizes only (``Option.measured``)."""
    loan_rule: bool = False
    """A held job grows only where the time saved over a loan as long as its own past
    loans were repays ``loan_margin`` x its two restarts (``danlu_loan.repays``; the mean
    weighs the latest loan ``loan_weight``); ``loan_all``: also other running jobs' growth
    (hold over, regret) while jobs wait."""
    loan_weight: float = 0.5
    loan_margin: float = 1.0
    loan_all: bool = False
    adaptive_jobs: bool = True
    """Let jobs that report ``observed["adaptive"]`` re-pick their batch in-process
    (``Start.adaptive``); off: the policy picks every job's batch (rebatches in place)."""
    _memo: dict[
        tuple[str, bool], tuple[object, dm.JobModel | None, dict[int, tuple[float, int]]]
    ] = field(default_factory=dict, init=False, repr=False, compare=False)
    _waiting: EntryCache[WaitingEntry] = field(
        default_factory=lambda: EntryCache(NO_WAITING), init=False, repr=False, compare=False
    )
    """What a pending job's status object implies (options, unweighted rank): a waiting
    job's status does not change, so later rounds reuse it."""
    _running_memo: EntryCache[RunningEntry] = field(
        default_factory=lambda: EntryCache(NO_RUNNING), init=False, repr=False, compare=False
    )
    """The same for running jobs (what does not depend on the clock)."""
    _family_hosts: FamilyHosts = field(
        default_factory=FamilyHosts, init=False, repr=False, compare=False
    )
    """Where the running jobs of each family sit, for the sharing rule (kept across rounds)."""
    _packing: PackingMemo = field(
        default_factory=PackingMemo, init=False, repr=False, compare=False
    )
    """The typical pods and the packing scorer of the ``fgd`` and ``danlu`` placements of
    shared requests (kept across rounds)."""
    _shape: list[tuple[int, int]] = field(
        default_factory=list, init=False, repr=False, compare=False
    )
    """The (cluster GPUs, GPUs per node) the cached options were computed for."""

    def __post_init__(self) -> None:
        if self.alloc not in ("shares", "walk"):
            raise ConfigError(f"danlu policy: alloc must be 'shares' or 'walk', not {self.alloc!r}")
        check_options(self, self.option_ranges)

    # -- model ------------------------------------------------------------------------
    def _model(
        self, job: JobStatus, marks: Mapping[str, float], optimistic: bool = False
    ) -> tuple[dm.JobModel | None, dict[int, tuple[float, int]]]:
        key = dm.model_key(marks, job.observed)
        hit = self._memo.get((job.id, optimistic))
        if hit is not None and hit[0] == key:
            return hit[1], hit[2]
        model = dm.build(marks, job.observed, optimistic, self.flat_sync)
        table: dict[int, tuple[float, int]] = {}
        self._memo[(job.id, optimistic)] = (key, model, table)
        return model, table

    def _work(
        self, job: JobStatus, marks: Mapping[str, float], now: float, update: dict[str, float]
    ) -> float | None:
        """The job's total work, updated (:func:`~.work_estimate.estimate_work`)."""
        return estimate_work(job, marks, now, self.restart_cost, update)

    # -- options ----------------------------------------------------------------------
    def _options(
        self,
        job: JobStatus,
        marks: Mapping[str, float],
        work: float | None,
        capacity: int,
        gpn: int,
        now: float,
    ) -> list[Option]:
        """The job's options: GPU count -> predicted remaining seconds (restart included
        unless the option keeps the current allocation and batch)."""
        req = job.request
        running = job.running
        cur_gpus = job.allocation.num_gpus if running else 0
        restart = self.restart_cost
        explore = self.explore_after <= 0  # always optimistic: one model per job
        model, table = self._model(job, marks, explore) if job.observed else (None, {})
        floor, ceiling = gpu_range(req)
        if model is None:
            gpus = self._unmodelled_gpus(job, gpn)
            left = self._unmeasured_seconds(job, now)
            if running:
                return [Option(cur_gpus, left, None, True)]
            if gpus > capacity:
                return []
            return [Option(gpus, left + restart, None, False)]
        remaining = 1.0 - job.observed.get("progress", 0.0)
        # min() before int(): a huge grow_factor must not overflow to inf
        grown = int(min(self.grow_factor * max(model.max_replicas_seen, 1), capacity))
        cap = min(capacity, ceiling, max(grown, floor), model.max_batch // model.min_local)
        options: dict[int, Option] = {}
        total = work
        if total is None:  # no rate yet: the prior at the current (or requested) size
            base_n = cur_gpus or min(req.gpus, cap, gpn)
            ref_good = self._good(model, table, base_n, gpn)[0]
            if ref_good <= 0:
                return []
            total = ref_good * self.new_job_seconds
        base_good = 0.0 if explore else self._good(model, table, cur_gpus or 1, gpn)[0]
        if base_good > 0 and remaining * total / base_good >= self.explore_after:
            explorer, table = self._model(job, marks, optimistic=True)
            model = explorer or model
        adaptive = is_adaptive(job, self.adaptive_jobs)
        for n in gpu_counts(cap, gpn, floor):
            good, batch = self._good(model, table, n, gpn)
            if good <= 0:
                continue
            if n != cur_gpus:
                seen = n <= model.max_replicas_seen
                options[n] = Option(n, remaining * total / good + restart, batch, measured=seen)
            elif not adaptive:  # same GPUs, another batch: a rebatch, no restart
                options[n] = Option(n, remaining * total / good, batch, False, in_place=True)
            # an adaptive job re-picks its batch on the GPUs it has by itself
        out = [options[n] for n in sorted(options)]
        if running:
            good = dm.observed_goodput(job.observed)
            if adaptive and good > 0:  # it moves to its best batch on these GPUs by itself
                nodes = len(job.allocation.node_counts())
                if nodes == math.ceil(cur_gpus / gpn):  # packed: the table has it
                    best = self._good(model, table, cur_gpus, gpn)[0]
                else:
                    best = model.best_batch(cur_gpus, gpn, nodes)[0]
                good = max(good, best)
            if good > 0:  # beside a same-size option at another batch, if any
                keep = Option(cur_gpus, remaining * total / good, None, True)
                out.insert(sum(1 for o in out if o.gpus < cur_gpus), keep)
        return out

    def _unmodelled_gpus(self, job: JobStatus, gpn: int) -> int:
        """The GPUs of the one option of a job with no throughput model yet: its request's
        (one for a shared request), capped at ``first_gpus`` (else one node) for an elastic
        job never measured, but not below its request's least."""
        req = job.request
        gpus = req.gpus if not req.shares_gpu else 1
        if job.observed.get("max_batch"):  # elastic, never measured: one node first
            gpus = max(min(gpus, self.first_gpus or gpn), gpu_range(req)[0])
        return gpus

    def _beyond_capacity(
        self, plan: Plan, waits: list[WaitingEntry], capacity: int, gpn: int
    ) -> None:
        """Give each waiting whole-GPU job in ``waits`` left with no option because its least
        GPUs (those :meth:`_options` starts from) are more than the ``capacity`` it may use
        (open to new work, not held by jobs that stay) or than its batch limits allow, that
        reason in ``plan.waiting``, not "shorter-ranked jobs hold the GPUs" (a 4-GPU job with
        2 GPUs open, on an idle cluster). A scan of options: the decisions are the same."""
        waiting = plan.waiting
        for job in (w.status for w in waits if not w.options and w.status.id not in waiting):
            explore = self.explore_after <= 0  # the model _options built
            model = self._model(job, job.marks, explore)[0] if job.observed else None
            least = gpu_range(job.request)[0] if model else self._unmodelled_gpus(job, gpn)
            if model is not None and least > model.max_batch // model.min_local:
                waiting[job.id] = beyond_batch_limits(least, model.max_batch, model.min_local)
            elif least > capacity:
                waiting[job.id] = beyond_reach(least, max(capacity, 0))

    def _unmeasured_seconds(self, job: JobStatus, now: float) -> float:
        """A job with no throughput model yet: the rest of the user's expected duration
        while it has reported nothing, else ``new_job_seconds``."""
        duration = expected_seconds(job.request)
        if duration is not None and not job.observed:
            return max(duration - job.run_time_at(now), 1.0)
        return self.new_job_seconds

    @staticmethod
    def _good(
        model: dm.JobModel, table: dict[int, tuple[float, int]], n: int, gpn: int
    ) -> tuple[float, int]:
        hit = table.get(n)
        if hit is None:
            hit = model.best_batch(n, gpn)
            table[n] = hit
        return hit

    def _waiting_job(
        self, job: JobStatus, capacity: int, gpn: int, now: float, scale: int
    ) -> WaitingEntry:
        """A pending job's options and unweighted rank (cached per status object; a round
        builds them through :meth:`_waiting_builder`)."""
        req = job.request
        waited = req.submit_time + job.run_time
        if req.shares_gpu:  # placed by the sharing rule, not the walk
            one = [Option(1, math.inf, None, False)]  # what the starvation rule frees for it
            return WaitingEntry(job, one, math.inf, waited, waiting_since(job), req.seq, True)
        opts = self._options(job, job.marks, job.marks.get(WORK), capacity, gpn, now)
        best = min(
            (o.seconds * (1.0 + self.width * o.gpus / scale) for o in opts), default=math.inf
        )
        return WaitingEntry(job, opts, best, waited, waiting_since(job), req.seq)

    def _waiting_builder(
        self, capacity: int, gpn: int, now: float, scale: int
    ) -> Callable[[JobStatus], WaitingEntry]:
        """:meth:`_waiting_job` for this round, with a never-measured job's one option (what
        :meth:`_options` would give it) built directly: a queue of 10,000 such jobs is most
        of a first round at 1,000 nodes."""
        restart, width = self.restart_cost, self.width

        def build(job: JobStatus) -> WaitingEntry:
            req = job.request
            if job.observed or req.shares_gpu:
                return self._waiting_job(job, capacity, gpn, now, scale)
            waited, since, gpus = req.submit_time + job.run_time, waiting_since(job), req.gpus
            if gpus > capacity:
                return WaitingEntry(job, [], math.inf, waited, since, req.seq)
            seconds = self._unmeasured_seconds(job, now) + restart
            best = seconds * (1.0 + width * gpus / scale)
            return WaitingEntry(job, [Option(gpus, seconds)], best, waited, since, req.seq)

        return build

    def _pending(
        self, pending: tuple[JobStatus, ...], capacity: int, total: int, gpn: int, now: float
    ) -> list[WaitingEntry]:
        """Every pending job's cached round inputs, in queue order.

        The cache holds options for the whole cluster (``total`` GPUs), so that a change of
        ``capacity`` (GPUs held by non-preemptible or PREEMPTING jobs, or under shared
        requests) does not rebuild 10,000 entries: only the entries with options wider than
        ``capacity`` are cut down, this round."""
        if self._shape != [(total, gpn)]:  # options computed for another cluster shape
            self._waiting.clear()
            self._shape[:] = [(total, gpn)]
        scale = max(total, 1)
        out = self._waiting.entries(pending, self._waiting_builder(total, gpn, now, scale))
        if capacity < total:
            out = [self._within(w, capacity, scale) for w in out]
        return out

    def _within(self, waiting: WaitingEntry, capacity: int, scale: int) -> WaitingEntry:
        """``waiting`` with only the options that fit ``capacity`` GPUs (itself when all
        do; the options are sorted by GPU count)."""
        opts = waiting.options
        if not opts or opts[-1].gpus <= capacity:
            return waiting
        kept = [o for o in opts if o.gpus <= capacity]
        best = min(
            (o.seconds * (1.0 + self.width * o.gpus / scale) for o in kept), default=math.inf
        )
        return waiting._replace(options=kept, best=best)

    def _running_knobs(self) -> RunningKnobs:
        """The knobs :mod:`danlu_running` reads."""
        return RunningKnobs(
            self.min_hold,
            self.move_slack,
            self.max_moves,
            self.new_job_seconds,
            self.starve_hold,
            self.packed_sync,
            self.aging,
            self.width,
            self.rank_hysteresis,
            self.move_budget,
            self.grow_after,
        )

    def _running_job(
        self, job: JobStatus, now: float, gpn: int, knobs: RunningKnobs
    ) -> RunningEntry:
        """A running job's round inputs that depend on its status object alone (cached;
        :func:`~.danlu_running.running_entry`)."""
        return running_entry(job, now, gpn, knobs)

    def _running(
        self,
        movable: list[JobStatus],
        capacity: int,
        total: int,
        gpn: int,
        now: float,
        new_marks: dict[str, dict[str, float]],
        *,
        queued: bool,
    ) -> tuple[list[list[Option]], list[int], list[bool], FloatArray, tuple[int, int]]:
        """Options, pins, growth permissions and rank keys of the preemptible running jobs
        (their status-only inputs cached per status object; marks to write go in
        ``new_marks``; ``queued``: jobs are waiting), and the GPUs they hold within a hold
        the starvation rule gave them, in all and of those it started within the hold's last
        slice (``danlu_holds.STARVE_SLICES``). Jobs without observations are computed as
        arrays."""
        count = len(movable)
        knobs = self._running_knobs()
        runs = self._running_memo.entries(
            movable, lambda job: self._running_job(job, now, gpn, knobs)
        )
        keys, weight, since, held, may_grow, promoted_gpus = running_ranks(runs, now, total, knobs)
        scale = max(total, 1)  # C in the rank: the cluster's GPUs
        width, shorter = self.width, 1.0 - self.rank_hysteresis
        pinned: list[int] = np.where(held, 0, -1).tolist()
        grow: list[bool] = may_grow.tolist()
        # no observations: the lone option (the rank above is from the current time)
        all_options = [run.options or [] for run in runs]
        for i in compress(range(count), map(is_, map(_OPTIONS, runs), repeat(None))):
            job = movable[i]
            opts, pin, grow[i], update = self._measured(
                job, runs[i], now, capacity, gpn, float(since[i]), bool(held[i]), queued
            )
            if update:
                new_marks[job.id] = update
            best = min((o.seconds * (1.0 + width * o.gpus / scale) for o in opts), default=math.inf)
            all_options[i], pinned[i], keys[i] = opts, pin, best * shorter / weight[i]
        return all_options, pinned, grow, keys, promoted_gpus

    def _measured(
        self,
        job: JobStatus,
        run: RunningEntry,
        now: float,
        capacity: int,
        gpn: int,
        since: float,
        held: bool,
        queued: bool,
    ) -> tuple[list[Option], int, bool, dict[str, float]]:
        """A running job with observations, ``since`` seconds after its (re)start: its
        options (pinned to the current allocation while held; ``queued``: jobs wait, so
        GPUs it grew into may be taken back), pin, growth permission and the marks to
        write."""
        marks = run.marks
        update = dict(run.update)
        work = self._work(job, marks, now, update)
        opts = self._options(job, marks, work, capacity, gpn, now)
        loan = dl.loan_time(marks) if self.loan_rule else None
        if loan is not None and self.loan_all and queued:
            cur, margin = job.allocation.num_gpus, self.loan_margin
            opts = dl.drop_unpaid(opts, cur, loan, self.restart_cost, margin)
        if held and since >= self.grow_after and regrets(opts, self.regret):
            # the last move measured far worse than predicted: undo it, but a held job is
            # never preempted: pinned at its smallest option, it may take any bigger one
            if opts and not run.stuck:
                return opts, 0, True, update
            held = False
        if self.shrink_stuck and run.stuck and queued and opts and since >= run.hold:
            return opts, 0, since >= self.grow_after, update  # may shrink, never preempted
        may_grow = held and since >= self.grow_after and not run.shares
        if not held:
            return opts, -1, may_grow, update
        # pinned to its allocation; bigger options stay if it may grow
        cur = job.allocation.num_gpus
        left = min((o.seconds for o in opts), default=self.new_job_seconds)
        kept = [o for o in opts if o.keep][:1] or [Option(cur, left, None, True)]
        bigger = [o for o in opts if not o.keep and o.gpus > cur] if may_grow else []
        if loan is not None and bigger:  # what it grows into comes back after about `loan`
            margin, restart = self.loan_margin, self.restart_cost
            bigger = dl.worth_lending(bigger, kept[0].seconds, loan, restart, margin)
        # GPUs it grew into are lent: while jobs wait, it may go back to its size before
        lent = int(marks.get(GREW_FROM, 0.0)) if self.lend and queued else 0
        back = [o for o in opts if o.gpus == lent and not o.keep] if lent < cur else []
        return back[:1] + kept + bigger, 0, may_grow or bool(back), update

    # -- round ------------------------------------------------------------------------
    def schedule(self, view: ClusterView) -> Plan:
        now = view.time
        cluster = view.cluster
        gpn = max((node.gpus for node in cluster.nodes), default=1)
        self._forget_gone(view)
        if nothing_to_size(view):
            return Plan(recheck_at=math.inf)
        # GPUs not ours to move: non-preemptible and draining jobs' and the GPUs shared jobs
        # sit on (each GPU once, however many shares it holds); those jobs keep running as
        # they are. The GPUs of closed nodes take no new work
        movable, fixed = split_running(view)
        capacity = cluster.total_gpus - gpus_unavailable(fixed, view)
        total = cluster.total_gpus
        waits = self._pending(view.pending, capacity, total, gpn, now)
        capacity_left = capacity  # what a waiting job's options were cut to
        shared_waits: list[WaitingEntry] = []
        if any(map(_SHARED, waits)):
            shared_waits = [w for w in waits if w.shared]
            waits = [w for w in waits if not w.shared]
        new_marks: dict[str, dict[str, float]] = {}
        all_options, pinned, grow, run_keys, promoted_gpus = self._running(
            movable, capacity, total, gpn, now, new_marks, queued=bool(waits)
        )
        first = len(movable)
        whole = movable + list(map(_STATUS, waits))
        all_options += map(_OPTIONS, waits)
        pinned += [-1] * len(waits)
        grow += [False] * len(waits)
        # rank: min T(n) (1 + width n / C) over the aging weight, ties by submission order
        count = len(waits)
        waiting_from = np.fromiter(map(_WAITING_FROM, waits), float, count)
        best = np.fromiter(map(_BEST, waits), float, count)
        keys = np.concatenate(
            (
                run_keys,
                best / (1.0 + np.maximum(0.0, now - waiting_from) / self.aging),
            )
        )
        seqs = np.concatenate(
            (
                np.fromiter(map(_SEQ, movable), np.int64, first),
                np.fromiter(map(_WAIT_SEQ, waits), np.int64, count),
            )
        )
        order: list[int] = np.lexsort((seqs, keys)).tolist()
        # a non-preemptible job the starvation rule started holds its share too
        hold = self.starve_hold
        fixed_until = np.array([promoted_until(j.marks, hold) for j in fixed], float)
        fixed_gpus = np.array([j.allocation.num_gpus for j in fixed], np.int64)
        fixed_held, fixed_lately = promotion_holds(fixed_until, fixed_gpus, now, hold)
        held_gpus, lately_gpus = promoted_gpus[0] + fixed_held, promoted_gpus[1] + fixed_lately
        rule = StarveRule(self.starve_after, self.starve_share, self.starve_hold)
        starving = starving_jobs(
            rule, waits + shared_waits, now, first, capacity, held_gpus, lately_gpus
        )
        # a starving shared request gets a GPU the walk leaves free (the walk never places
        # shares, so whole-GPU jobs holding every GPU would keep it waiting for good)
        whole_end = first + len(waits)
        promoted_shares = {
            shared_waits[j - whole_end].status.id for j in starving if j >= whole_end
        }
        if promoted_shares:
            starving = [j for j in starving if j < whole_end]
            capacity -= len(promoted_shares)
        if starving:  # waited too long: first in line, at their smallest size
            promoted = set(starving)
            order = starving + [j for j in order if j not in promoted]
            for j in starving:
                all_options[j] = all_options[j][:1]
            capacity -= starving_reserve(all_options, starving, capacity, pinned)
        knobs = (self.hysteresis, grow, self.price_scale, self.spare_gain)
        # nothing waits: a job measured at one size only may explore idle GPUs
        explore = None if waits or shared_waits else explorers(movable, all_options)
        if self.alloc == "shares":  # heSRPT's delay of the jobs behind (danlu_shares)
            p_max, seen = self.share_p_max, self.share_measured
            chosen = share_walk(
                all_options, order, capacity, pinned, *knobs, p_max, seen, explore=explore
            )
        else:
            chosen = walk(all_options, order, capacity, pinned, *knobs, explore=explore)
        placing = PlaceKnobs(self.placement, self.adaptive_jobs, self.loan_rule, self.loan_weight)
        promoted_ids = {whole[j].id for j in starving}
        plan = place_plan(
            view,
            whole,
            first,
            all_options,
            chosen,
            new_marks,
            placing,
            promoted_ids,
            reserve=len(promoted_shares),  # whole GPUs the walk left the starving shares
        )
        self._beyond_capacity(plan, waits, capacity_left, gpn)
        if not shared_waits:
            mark_stopped(view, plan, movable, placing)
            return plan
        gain, spread, rate = self.share_min_gain, self.spread_shares, self.share_min_rate
        started = {s.job_id for s in plan.starts}
        whole_waiting = any(w.status.id not in started for w in waits)
        plan = place_shared(
            view,
            list(map(_STATUS, shared_waits)),
            plan,
            self.placement,
            gain,
            spread,
            rate,
            hosts=self._family_hosts,
            whole_waiting=whole_waiting,
            first=promoted_shares,
            memo=self._packing,
        )
        for start in plan.starts:
            if start.job_id in promoted_shares:
                plan.marks.setdefault(start.job_id, {})[PROMOTED] = now
        if promoted_shares:  # a job preempted for their room they did not take keeps running
            plan = keep_unused(view, plan)
        mark_stopped(view, plan, movable, placing)
        return plan

    def _forget_gone(self, view: ClusterView) -> None:
        """Drop the models of jobs that are neither running nor pending any more (finished,
        cancelled), so a long-running server's memo stays in proportion to its live jobs.
        Checked only once the memo holds twice the live jobs: amortised O(1) a round."""
        live = len(view.running) + len(view.pending)
        if len(self._memo) <= 2 * live + 64:
            return
        ids = {job.id for job in view.running}
        ids.update(job.id for job in view.pending)
        for key in [key for key in self._memo if key[0] not in ids]:
            del self._memo[key]


_STATUS = attrgetter("status")
_OPTIONS = attrgetter("options")
_BEST = attrgetter("best")
_WAITING_FROM = attrgetter("waiting_from")
_WAIT_SEQ = attrgetter("seq")
_SHARED = attrgetter("shared")
_SEQ = attrgetter("request.seq")
