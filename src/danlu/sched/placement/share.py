"""Placement of GPU-sharing (fractional) and whole-GPU requests on a heterogeneous cluster.

The model follows the FGD paper (ATC'23, "Beware of Fragmentation"): every node has CPU
(milli-cores), host memory (MiB), a GPU model and a number of GPUs, each GPU split into
1000 milli-GPU. A request asks for CPU, memory and either

* nothing on GPUs (``num_gpu == 0``),
* a fraction of ONE GPU (``num_gpu == 1`` and ``0 < gpu_milli < 1000``), placed on a
  single GPU that still has that much free, or
* ``num_gpu`` whole GPUs (``gpu_milli == 1000``), which take fully free GPUs only,

optionally restricted to a set of GPU models (``gpu_spec``).

:class:`ShareCluster` keeps the state in numpy arrays (one row per node) so that a
placement decision is a handful of vectorised operations over all nodes. Which feasible
node wins is decided by a :class:`ShareScorer` chosen by name (``random``, ``best-fit``,
``fgd``; :func:`register_scorer` adds more); ties go to the node with the lowest
``tie_rank``. Everything here is pure: no I/O, and the only randomness comes from the
``numpy.random.Generator`` handed in.
"""

from __future__ import annotations

import inspect
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar

import numpy as np
import numpy.typing as npt

from danlu.core.errors import ConfigError, PlacementError, SpecError, UnknownNameError
from danlu.core.values import quoted

if TYPE_CHECKING:
    from danlu.sched.placement.frag import TypicalPods

MILLI = 1000
"""milli-GPU in one whole GPU."""

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]


@dataclass(frozen=True, slots=True)
class ShareNode:
    """Capacity of one node: CPU milli-cores, memory MiB, GPU count and GPU model."""

    name: str
    cpu_milli: int
    memory_mib: int
    num_gpu: int = 0
    model: str = ""

    def __post_init__(self) -> None:
        if self.cpu_milli < 0 or self.memory_mib < 0 or self.num_gpu < 0:
            raise SpecError(f"node {self.name}", "capacities must be >= 0")
        if self.num_gpu > 0 and not self.model:
            raise SpecError(f"node {self.name}.model", "a node with GPUs needs a GPU model")


@dataclass(frozen=True, slots=True)
class ShareRequest:
    """What one pod / job asks for.

    ``gpu_milli`` is per GPU: below 1000 it is a share of one GPU (then ``num_gpu`` must
    be 1), 1000 means whole GPUs. ``gpu_spec`` lists the GPU models allowed (empty: any).
    """

    cpu_milli: int
    memory_mib: int = 0
    num_gpu: int = 0
    gpu_milli: int = 0
    gpu_spec: frozenset[str] = field(default_factory=frozenset)

    def __post_init__(self) -> None:
        if self.cpu_milli < 0 or self.memory_mib < 0:
            raise SpecError("cpu_milli/memory_mib", "must be >= 0")
        if self.num_gpu < 0:
            raise SpecError("num_gpu", "must be >= 0")
        if self.num_gpu == 0 and self.gpu_milli != 0:
            raise SpecError("gpu_milli", "must be 0 when num_gpu is 0")
        if self.num_gpu > 0 and not 0 < self.gpu_milli <= MILLI:
            raise SpecError("gpu_milli", f"must be in 1..{MILLI} when GPUs are requested")
        if self.num_gpu > 1 and self.gpu_milli != MILLI:
            raise SpecError("gpu_milli", "a request for several GPUs must take whole GPUs (1000)")

    @property
    def shared(self) -> bool:
        """True for a fraction of one GPU."""
        return self.num_gpu == 1 and self.gpu_milli < MILLI

    @property
    def total_gpu_milli(self) -> int:
        """milli-GPU asked for in all (``num_gpu * gpu_milli``)."""
        return self.num_gpu * self.gpu_milli


@dataclass(frozen=True, slots=True)
class Placement:
    """Where a request went: node index and the GPU indices on that node."""

    node: int
    gpus: tuple[int, ...]
    request: ShareRequest


class ShareScorer(ABC):
    """A node-scoring policy: higher score wins; ties go to the lowest ``tie_rank``.

    Subclasses implement :meth:`score`; they may override :meth:`pick_gpus` to choose
    which GPUs of the winning node a request takes (default: the tightest-fitting GPU
    for a share, the lowest-indexed fully free GPUs for whole GPUs).
    """

    name: ClassVar[str] = ""

    @abstractmethod
    def score(
        self,
        cluster: ShareCluster,
        request: ShareRequest,
        nodes: IntArray,
        rng: np.random.Generator,
    ) -> FloatArray:
        """Scores of the feasible ``nodes`` (indices) for ``request``, same length."""

    def pick_gpus(
        self,
        cluster: ShareCluster,
        request: ShareRequest,
        node: int,
        rng: np.random.Generator,
    ) -> tuple[int, ...]:
        """GPU indices on ``node`` for ``request`` (the node is known to fit)."""
        return tightest_gpus(cluster.gpu_free[node], request)


def tightest_gpus(gpu_free: IntArray, request: ShareRequest) -> tuple[int, ...]:
    """Best-fit GPU choice on one node.

    A share takes the GPU with the least free milli that still fits (lowest index on
    ties); whole GPUs are the lowest-indexed fully free ones; no GPUs for CPU-only.
    """
    if request.num_gpu == 0:
        return ()
    if request.shared:
        fits = gpu_free >= request.gpu_milli
        masked = np.where(fits, gpu_free, MILLI + 1)
        return (int(np.argmin(masked)),)
    full = np.flatnonzero(gpu_free == MILLI)
    return tuple(int(g) for g in full[: request.num_gpu])


class ShareCluster:
    """Vectorised allocation state of a cluster of :class:`ShareNode`.

    Arrays (row = node): ``cpu_free``, ``mem_free``, ``gpu_free`` (nodes x max GPUs,
    absent GPUs padded with 0 free), ``gpu_free_total``, ``n_full`` (fully free GPUs),
    ``max_free`` (largest free share), ``model_idx`` (index into ``models``), and the
    fixed capacities ``cpu_cap``, ``mem_cap``, ``num_gpu``. ``epoch[n]`` grows each time
    node ``n`` changes, so scorers can cache per-node values.
    """

    def __init__(
        self,
        nodes: Sequence[ShareNode],
        scorer: str | ShareScorer = "best-fit",
        *,
        rng: np.random.Generator | None = None,
        tie_rank: Sequence[int] | IntArray | None = None,
        typical: TypicalPods | None = None,
    ) -> None:
        if not nodes:
            raise ConfigError("a cluster needs at least one node")
        self.nodes: tuple[ShareNode, ...] = tuple(nodes)
        n = len(self.nodes)
        self.models: tuple[str, ...] = tuple(sorted({nd.model for nd in self.nodes}))
        index = {m: i for i, m in enumerate(self.models)}
        self.model_idx: IntArray = np.array([index[nd.model] for nd in self.nodes], np.int64)
        self.cpu_cap: IntArray = np.array([nd.cpu_milli for nd in self.nodes], np.int64)
        self.mem_cap: IntArray = np.array([nd.memory_mib for nd in self.nodes], np.int64)
        self.num_gpu: IntArray = np.array([nd.num_gpu for nd in self.nodes], np.int64)
        self.max_gpus = max(1, int(self.num_gpu.max()))
        cols = np.arange(self.max_gpus)
        self.gpu_exists: BoolArray = cols[None, :] < self.num_gpu[:, None]
        self.gpu_cap: IntArray = np.where(self.gpu_exists, MILLI, 0).astype(np.int64)
        self.total_gpu_milli = int(self.gpu_cap.sum())
        self.cpu_free: IntArray = self.cpu_cap.copy()
        self.mem_free: IntArray = self.mem_cap.copy()
        self.gpu_free: IntArray = self.gpu_cap.copy()
        self.gpu_free_total: IntArray = self.gpu_free.sum(axis=1)
        self.n_full: IntArray = self.num_gpu.copy()
        self.max_free: IntArray = self.gpu_free.max(axis=1)
        self.epoch: IntArray = np.zeros(n, np.int64)
        if tie_rank is None:
            self.tie_rank: IntArray = np.arange(n, dtype=np.int64)
        else:
            rank = np.asarray(tie_rank, dtype=np.int64)
            if rank.shape != (n,):
                raise ConfigError(f"tie_rank needs one entry per node ({n}), got {rank.shape}")
            self.tie_rank = rank
        self.rng = rng if rng is not None else np.random.default_rng(0)
        self.scorer = make_scorer(scorer, typical=typical) if isinstance(scorer, str) else scorer
        self._spec_masks: dict[frozenset[str], BoolArray] = {}

    # ----------------------------------------------------------------- queries
    def __len__(self) -> int:
        return len(self.nodes)

    def allocated_gpu_milli(self) -> int:
        """milli-GPU currently allocated over the whole cluster."""
        return self.total_gpu_milli - int(self.gpu_free_total.sum())

    def model_allowed(self, spec: frozenset[str]) -> BoolArray:
        """Per-model mask (len ``models``) of the models that ``spec`` allows, matched
        whatever the case (``t4`` allows ``T4``, as the scheduler's GPU types do)."""
        mask = self._spec_masks.get(spec)
        if mask is None:
            if spec:
                wanted = {s.casefold() for s in spec}
                mask = np.array([m.casefold() in wanted for m in self.models], np.bool_)
            else:
                mask = np.ones(len(self.models), np.bool_)
            self._spec_masks[spec] = mask
        return mask

    def feasible(self, request: ShareRequest) -> BoolArray:
        """Mask of the nodes where ``request`` fits now (CPU, memory, GPU model, GPUs)."""
        ok = (self.cpu_free >= request.cpu_milli) & (self.mem_free >= request.memory_mib)
        if request.num_gpu == 0:
            return ok
        ok &= self.model_allowed(request.gpu_spec)[self.model_idx]
        if request.shared:
            ok &= self.max_free >= request.gpu_milli
        else:
            ok &= self.n_full >= request.num_gpu
        return ok

    def choose(self, request: ShareRequest) -> Placement | None:
        """The placement the scorer picks for ``request`` (state unchanged), or None."""
        nodes = np.flatnonzero(self.feasible(request))
        if nodes.size == 0:
            return None
        scores = self.scorer.score(self, request, nodes, self.rng)
        best = scores == scores.max()
        winners = nodes[best]
        node = int(winners[np.argmin(self.tie_rank[winners])])
        gpus = self.scorer.pick_gpus(self, request, node, self.rng)
        return Placement(node, gpus, request)

    # ----------------------------------------------------------------- changes
    def place(self, request: ShareRequest) -> Placement | None:
        """Choose a node for ``request`` and allocate it; None if nothing fits."""
        placement = self.choose(request)
        if placement is not None:
            self.apply(placement)
        return placement

    def apply(self, placement: Placement) -> None:
        """Allocate a given placement; raises :class:`PlacementError` if it does not fit."""
        self._change(placement, -1)

    def release(self, placement: Placement) -> None:
        """Give back what ``placement`` took; raises :class:`PlacementError` if inconsistent."""
        self._change(placement, +1)

    def _change(self, placement: Placement, sign: int) -> None:
        req, n = placement.request, placement.node
        if not 0 <= n < len(self.nodes):
            raise PlacementError(f"node index {n} out of range")
        gpus = placement.gpus
        if len(gpus) != req.num_gpu or len(set(gpus)) != req.num_gpu:
            raise PlacementError(f"placement needs {req.num_gpu} distinct GPUs: {gpus}")
        cpu = int(self.cpu_free[n]) + sign * req.cpu_milli
        mem = int(self.mem_free[n]) + sign * req.memory_mib
        if not (0 <= cpu <= self.cpu_cap[n] and 0 <= mem <= self.mem_cap[n]):
            raise PlacementError(f"CPU/memory of node {self.nodes[n].name} would leave its range")
        if gpus:
            if min(gpus) < 0 or max(gpus) >= self.num_gpu[n]:
                raise PlacementError(f"GPU index out of range on node {self.nodes[n].name}")
            if not self.model_allowed(req.gpu_spec)[self.model_idx[n]]:
                raise PlacementError(f"GPU model of node {self.nodes[n].name} not allowed")
            row = self.gpu_free[n]
            old = [int(row[g]) for g in gpus]
            new = [v + sign * req.gpu_milli for v in old]
            if min(new) < 0 or max(new) > MILLI:
                raise PlacementError(f"GPU milli of node {self.nodes[n].name} would leave 0..1000")
            if sign < 0 and not req.shared and any(v != MILLI for v in old):
                raise PlacementError("whole-GPU requests need fully free GPUs")
            for g, v in zip(gpus, new, strict=True):
                row[g] = v
            self.gpu_free_total[n] += sign * req.gpu_milli * len(gpus)
            self.n_full[n] += sum(v == MILLI for v in new) - sum(v == MILLI for v in old)
            self.max_free[n] = row.max()
        self.cpu_free[n] = cpu
        self.mem_free[n] = mem
        self.epoch[n] += 1


# --------------------------------------------------------------------- scorers
class RandomScorer(ShareScorer):
    """Uniformly random feasible node; a share goes to a random GPU that fits."""

    name: ClassVar[str] = "random"

    def score(
        self,
        cluster: ShareCluster,
        request: ShareRequest,
        nodes: IntArray,
        rng: np.random.Generator,
    ) -> FloatArray:
        """Independent uniform scores (so the argmax is a uniform feasible node)."""
        return rng.random(nodes.size)

    def pick_gpus(
        self,
        cluster: ShareCluster,
        request: ShareRequest,
        node: int,
        rng: np.random.Generator,
    ) -> tuple[int, ...]:
        """A random fitting GPU for a share; lowest-indexed free GPUs otherwise."""
        if request.shared:
            fits = np.flatnonzero(cluster.gpu_free[node] >= request.gpu_milli)
            return (int(fits[rng.integers(fits.size)]),)
        return tightest_gpus(cluster.gpu_free[node], request)


class BestFitScorer(ShareScorer):
    """Best fit: least CPU + GPU left over on the node after placing, equally weighted.

    Left-over CPU and GPU are normalised by the largest node of the cluster (128 cores
    and 8 GPUs on openb). With ``quantize`` (the default) the score is cut to the
    integers 0..100 like the Kubernetes score scale of the FGD artifact, so near-equal
    nodes tie and the tie rank decides.
    """

    name: ClassVar[str] = "best-fit"

    def __init__(self, quantize: bool = True) -> None:
        self.quantize = quantize

    def score(
        self,
        cluster: ShareCluster,
        request: ShareRequest,
        nodes: IntArray,
        rng: np.random.Generator,
    ) -> FloatArray:
        """``100 * (1 - mean(left-over CPU share, left-over GPU share))``."""
        cpu_norm = float(max(1, int(cluster.cpu_cap.max())))
        gpu_norm = float(max(1, cluster.max_gpus * MILLI))
        cpu_left = (cluster.cpu_free[nodes] - request.cpu_milli) / cpu_norm * 0.5
        gpu_left = (cluster.gpu_free_total[nodes] - request.total_gpu_milli) / gpu_norm * 0.5
        raw = (1.0 - (cpu_left + gpu_left)) * 100.0
        return np.trunc(raw) if self.quantize else raw


# -------------------------------------------------------------------- registry
ScorerFactory = Callable[..., ShareScorer]
"""``factory(typical)``, or ``factory(typical, **options)`` when the caller gives options:
a scorer for the typical pods (``None`` where the caller has none)."""


def _no_options(name: str, options: Mapping[str, object]) -> None:
    if options:
        raise ConfigError(f"the {name} scorer takes no options, got {', '.join(options)}")


def _fgd_factory(typical: TypicalPods | None, **options: object) -> ShareScorer:
    from danlu.sched.placement.frag import FgdScorer  # frag imports this module

    _no_options("fgd", options)
    if typical is None:
        raise ConfigError("the fgd scorer needs the typical pods (typical=...)")
    return FgdScorer(typical)


DANLU_SCORER_OPTIONS = (
    "fgd_weight",
    "scarcity_weight",
    "remainder_weight",
    "large_weight",
    "reserve_weight",
)
"""The weights of :class:`~danlu.sched.placement.danlu_pack.DanluPackScorer` a caller may
set (``danlu sim pack --option large_weight=0``)."""


def _danlu_factory(typical: TypicalPods | None, **options: float) -> ShareScorer:
    from danlu.sched.placement.danlu_pack import DanluPackScorer  # imports frag

    if typical is None:
        raise ConfigError("the danlu scorer needs the typical pods (typical=...)")
    for name in options:
        if name not in DANLU_SCORER_OPTIONS:
            raise ConfigError(
                f"danlu scorer: unknown option {name!r}; valid: {', '.join(DANLU_SCORER_OPTIONS)}"
            )
    return DanluPackScorer(typical, **options)  # which checks the values


def _plain(name: str, make: Callable[[], ShareScorer]) -> ScorerFactory:
    """A factory for a scorer that needs neither the typical pods nor options."""

    def factory(typical: TypicalPods | None, **options: object) -> ShareScorer:
        _no_options(name, options)
        return make()

    return factory


def _accepted_options(factory: ScorerFactory) -> list[str] | None:
    """The option keywords ``factory(typical, **options)`` accepts, or ``None`` when it
    takes any (``**options``: it checks them itself) or its signature is unknown."""
    try:
        params = list(inspect.signature(factory).parameters.values())
    except (TypeError, ValueError):  # a callable without a readable signature
        return None
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
        return None
    if params and params[0].kind in (
        inspect.Parameter.POSITIONAL_ONLY,
        inspect.Parameter.POSITIONAL_OR_KEYWORD,
    ):
        params = params[1:]  # the typical pods, given by position
    keyword = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    return [p.name for p in params if p.kind in keyword]


def _check_options(name: str, options: object, factory: ScorerFactory) -> None:
    """Refuse ``options`` the factory could only meet with a bare :class:`TypeError` (not a
    mapping, a name that is no string, a keyword the factory lacks) as a
    :class:`ConfigError` naming the scorer, the options and the fix."""
    if options is None:
        return
    if not isinstance(options, Mapping):
        raise ConfigError(
            f"{name} scorer: options must be a mapping of option names to values, e.g. "
            f"{{'<option>': 1.0}}, or None for the defaults; got {quoted(options)}"
        )
    for key in options:
        if not isinstance(key, str):
            raise ConfigError(
                f"{name} scorer: the option name {quoted(key)} in options must be a string, "
                "e.g. {'<option>': 1.0}"
            )
    accepted = _accepted_options(factory)
    if accepted is None or not options:
        return
    if not accepted:
        _no_options(name, options)
    for key in options:
        if key not in accepted:
            raise ConfigError(
                f"{name} scorer: unknown option {key!r}; valid: {', '.join(accepted)}"
            )


class ScorerRegistry:
    """Named scorer factories. :func:`default_scorers` returns a fresh one holding the
    built-ins; add your own on your instance (no process-global state)."""

    def __init__(self) -> None:
        self._factories: dict[str, ScorerFactory] = {}

    def register(self, name: str, factory: ScorerFactory) -> None:
        """Make :meth:`create` build a scorer named ``name`` with ``factory(typical)``
        (``factory(typical, **options)`` when options are given)."""
        if not name:
            raise ConfigError("a scorer needs a non-empty name")
        if name in self._factories:
            raise ConfigError(f"a scorer named {name!r} is already registered")
        self._factories[name] = factory

    def names(self) -> list[str]:
        return sorted(self._factories)

    def create(
        self,
        name: str,
        *,
        typical: TypicalPods | None = None,
        options: Mapping[str, object] | None = None,
    ) -> ShareScorer:
        """Build scorer ``name`` (``typical`` is needed by ``fgd`` and ``danlu``). Non-empty
        ``options`` go to the factory as keywords: the built-in ``danlu`` takes
        :data:`DANLU_SCORER_OPTIONS`, the other built-ins refuse any. Options that are no
        mapping, an option name that is no string, or one the factory has no keyword for
        raise :class:`ConfigError` (listing the accepted names)."""
        factory = self._factories.get(name)
        if factory is None:
            raise UnknownNameError("placement scorer", name, self.names())
        _check_options(name, options, factory)
        if not options:
            return factory(typical)
        return factory(typical, **options)


def default_scorers() -> ScorerRegistry:
    """A new registry with the built-in scorers: ``random``, ``best-fit``, ``fgd``, ``danlu``."""
    registry = ScorerRegistry()
    registry.register("random", _plain("random", RandomScorer))
    registry.register("best-fit", _plain("best-fit", BestFitScorer))
    registry.register("fgd", _fgd_factory)
    registry.register("danlu", _danlu_factory)
    return registry


def scorer_names() -> list[str]:
    """Names of the built-in scorers."""
    return default_scorers().names()


def make_scorer(
    name: str,
    *,
    typical: TypicalPods | None = None,
    registry: ScorerRegistry | None = None,
    options: Mapping[str, object] | None = None,
) -> ShareScorer:
    """Build scorer ``name`` from ``registry`` (default: the built-ins) with ``options``."""
    return (registry or default_scorers()).create(name, typical=typical, options=options)
