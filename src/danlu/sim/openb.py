"""The FGD paper's allocation experiment on the Alibaba "openb" GPU-sharing trace.

Protocol (as in the FGD artifact, ATC'23): the pod list, sorted by name, is shuffled
with the seed; random copies of its pods (drawn with replacement) follow it so the
arrived GPU demand can pass ``load`` x cluster capacity. Pods arrive one at a time and
never leave; a pod that fits nowhere fails but its demand still counts as arrived. After
every pod the GPU allocation ratio (allocated / total milli-GPU) is recorded; the result
for the seed is the mean ratio over the pods at which the arrived demand lies within
+-0.5 % of capacity of ``load`` x capacity (if one pod jumps over that window, the state
just after it). Pods after the window are not simulated. Ties between equally scored nodes go to a
node order drawn from the seed, like the artifact's random node-name prefixes.
"""

from __future__ import annotations

import csv
import math
import re
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from danlu.core.errors import ConfigError, DataError, UnknownNameError
from danlu.core.values import quoted
from danlu.sched.placement.frag import TypicalPods, cluster_fragmentation, typical_pods
from danlu.sched.placement.share import (
    ShareCluster,
    ShareNode,
    ShareRequest,
    ShareScorer,
    make_scorer,
)
from danlu.sim.csv_rows import (
    NODE_COLUMNS,
    POD_COLUMNS,
    bounded_lines,
    check_no_extra_values,
    column_names,
)
from danlu.sim.setting_types import check_instance, check_real, check_whole, option_refusal
from danlu.sim.workload_fields import MAX_CPU_MILLI, MAX_MEMORY_MIB
from danlu.sim.workload_rows import repeated_columns, repeated_message, undecodable_line

WINDOW_PCT = 0.5
"""Half-width (percent of capacity) of the arrived-demand window that is averaged."""

MOST_LOAD = 10.0
"""``load`` at most (``sim pack --load``): arrived demand of ten times the capacity. Pods
are packed one by one until the demand reaches the load, so the time grows with it (a load
of 1e300 packed for ever); the allocation ratio stops changing well before, at about 1.0
to 1.5."""

MAX_GPUS = 256
"""Most GPUs a node may have, or a pod ask for (the openb lists: at most 8). The cluster
keeps a row of that many GPUs per node, so a node of 2,000,000,000 GPUs hung the run."""


@dataclass(frozen=True, slots=True)
class OpenbPod:
    """One pod of a pod list: its name and what it asks for. ``source`` says where it was
    read (``file, line N``; empty for a pod built in code), for errors found later."""

    name: str
    request: ShareRequest
    source: str = field(default="", compare=False)


_LISTS: dict[str, tuple[str, tuple[str, ...]]] = {
    "--nodes": ("a node list", NODE_COLUMNS),
    "--pods": ("a pod list", POD_COLUMNS),
}
"""Each list's flag, what it is called and the columns it must have."""


def _missing_columns_message(path: Path, flag: str, header: Sequence[str]) -> str | None:
    """The error for the list given to ``flag`` (a key of :data:`_LISTS`) whose ``header``
    lacks one of its columns, or None if it has them all. A header with all of the other
    list's columns is that list given to the wrong flag (``--pods`` and ``--nodes``
    swapped), which the error says, naming the flag that takes it."""
    missing = [c for c in _LISTS[flag][1] if c not in header]
    if not missing:
        return None
    message = f"{path}, line 1: missing column(s) {', '.join(missing)}"
    for other, (called, columns) in _LISTS.items():
        if other != flag and all(c in header for c in columns):
            wanted = _LISTS[flag][0]
            message += (
                f"; this looks like {called}: give it to {other}, and {wanted} "
                f"({','.join(_LISTS[flag][1])}) to {flag}"
            )
    return message


def _read_rows(path: Path, flag: str) -> tuple[list[str], list[tuple[int, list[str]]]]:
    """The header (names stripped and in lower case, as a workload's:
    :func:`~danlu.sim.csv_rows.column_names`) and the rows of the pod or node list ``path``
    given to ``flag`` (a key of :data:`_LISTS`), each with the line it starts on (a quoted
    field may span lines: the rows after it were reported a line early for each such
    break). The list's role and flag (``a pod list (--pods)``) are named in the error for a
    line longer than :data:`~danlu.sim.csv_rows.MAX_LINE_CHARS` (a file without line breaks,
    such as ``/dev/zero``, was read for ever) or a file of more than
    :data:`~danlu.sim.csv_rows.MAX_LINES` lines, and for a header lacking the list's
    columns (:func:`_missing_columns_message`)."""
    what = f"{_LISTS[flag][0]} ({flag})"
    rows: list[tuple[int, list[str]]] = []
    reader: Any = None
    try:
        with path.open(newline="", encoding="utf-8-sig") as fh:  # a byte-order mark skipped
            reader = csv.reader(bounded_lines(fh, path, what))
            start = 1
            for row in reader:
                rows.append((start, row))
                start = reader.line_num + 1
    except OSError as exc:
        reason = exc.strerror or exc  # "No such file or directory", not its errno and path
        raise DataError(f"{path}: cannot read {what}: {reason}") from exc
    except UnicodeDecodeError as exc:
        line = undecodable_line(path)
        where = f"{path}:{line}" if line is not None else str(path)
        raise DataError(f"{where}: not a UTF-8 CSV file ({exc}); save it as UTF-8 text") from None
    except csv.Error as exc:
        line = reader.line_num if reader is not None else 1
        raise DataError(
            f"{path}:{line}: not a CSV file ({exc}); save it as UTF-8 CSV text"
        ) from None
    if not rows:
        raise DataError(f"{path}: empty file, expected a header line")
    header = column_names(rows[0][1])
    repeated = repeated_columns(header)
    if repeated:
        raise DataError(repeated_message(path, repeated))
    missing = _missing_columns_message(path, flag, header)
    if missing is not None:
        raise DataError(missing)
    return header, rows[1:]


def _fit_row(
    path: Path, line: int, header: Sequence[str], row: list[str], required: Sequence[str]
) -> list[str]:
    """``row`` as wide as ``header``: empty fields beyond the header (a spreadsheet's
    trailing commas) dropped and optional columns missing at its end read as empty, as a
    workload's rows are read (both were refused: ``12 fields, header has 11``). A
    :class:`DataError` naming the line for a value beyond the header (a field too many
    shifts the values after it) or a row too short to hold a ``required`` column."""
    width = len(header)
    if len(row) > width:
        fix = "quote a value holding a comma, or name every column in the header"
        check_no_extra_values(path, line, width, row[width:], fix)
        return row[:width]
    if len(row) < width:
        lacking = [name for name in header[len(row) :] if name in required]
        if lacking:
            raise DataError(
                f"{path}, line {line}: {len(row)} fields, header has {width}; the row lacks "
                f"column(s) {', '.join(lacking)}"
            )
        return row + [""] * (width - len(row))
    return row


_LIMITS: dict[str, tuple[int, str]] = {
    "gpu": (MAX_GPUS, " GPUs"),
    "num_gpu": (MAX_GPUS, " GPUs"),
    "gpu_milli": (1000, " milli-GPU"),
    "cpu_milli": (MAX_CPU_MILLI, " milli-cores (a million cores)"),
    "memory_mib": (MAX_MEMORY_MIB, " MiB (1 PiB)"),
}
"""Per numeric column of a node or pod list: its largest value, and the unit to name."""


_PLAIN_INTEGER = re.compile(r"[+-]?[0-9]+")
"""A cell :func:`_int` reads: ASCII digits, with an optional sign."""


def _check_plain_integer(path: Path, line: int, column: str, text: str) -> None:
    """A :class:`DataError` naming the file, line and column unless ``text`` is
    :data:`_PLAIN_INTEGER` (its value is not bounded here)."""
    if _PLAIN_INTEGER.fullmatch(text.strip()) is None:
        raise DataError(
            f"{path}, line {line}, column {column}: not a plain integer: {text!r}; write it "
            "with the digits 0-9 only (no '_', no other scripts' digits, no fraction)"
        )


def _int(path: Path, line: int, column: str, text: str) -> int:
    """The cell as an integer from 0 to the column's bound (:data:`_LIMITS`), or a
    :class:`DataError` naming the file, line and column. Only ASCII digits (with a sign)
    are an integer: Python's ``int`` also read ``1_000`` and other scripts' digits
    (``\u0661``, Arabic-Indic one) as numbers."""
    _check_plain_integer(path, line, column, text)
    value = int(text.strip())
    if value < 0:
        raise DataError(f"{path}, line {line}, column {column}: negative value {value}")
    maximum, unit = _LIMITS[column]
    if value > maximum:
        shown = text.strip() if len(text.strip()) <= 30 else f"{text.strip()[:30]}..."
        raise DataError(
            f"{path}, line {line}, column {column}: {shown} is too large, at most {maximum:,}{unit}"
        )
    return value


def _unique_name(
    path: Path, line: int, text: str, lines: dict[str, int], what: str = "node"
) -> str:
    """The name of the ``what`` (``node``: column ``sn``; ``pod``: column ``name``) on
    ``line``, recorded in ``lines`` (name: line); a :class:`DataError` if it is empty or
    one before it has it. Nodes and pods are ordered by name (the ties between equally
    scored nodes; the pods before the seed shuffles them), so two of one name, or nameless
    ones, left their order to the file's, and errors could not tell them apart."""
    column = "sn" if what == "node" else "name"
    name = text.strip()
    if not name:
        raise DataError(f"{path}, line {line}, column {column}: empty; give every {what} a name")
    first = lines.setdefault(name, line)
    if first != line:
        raise DataError(
            f"{path}, line {line}, column {column}: {what} name {name!r} is already used on "
            f"line {first}; give every {what} its own name"
        )
    return name


_NO_GPU_NODE = (
    "no node has a GPU (every gpu count is 0), so no GPU pod can be placed; give a node list "
    "with GPU nodes (as openb_node_list_gpu_node.csv)"
)
"""Why a node list without GPUs is refused, and the fix."""


def load_nodes(path: str | Path) -> list[ShareNode]:
    """Read an openb node list (``sn,cpu_milli,memory_mib,gpu,model``)."""
    path = Path(path)
    required = NODE_COLUMNS
    header, rows = _read_rows(path, "--nodes")
    col = {name: i for i, name in enumerate(header)}
    nodes: list[ShareNode] = []
    lines: dict[str, int] = {}  # each node's name, and the line it is on
    for line, row in rows:
        if not row:
            continue
        row = _fit_row(path, line, header, row, required)
        name = _unique_name(path, line, row[col["sn"]], lines)
        gpus = _int(path, line, "gpu", row[col["gpu"]])
        model = row[col["model"]].strip()
        if gpus > 0 and not model:
            raise DataError(f"{path}, line {line}, column model: empty for a node with GPUs")
        nodes.append(
            ShareNode(
                name=name,
                cpu_milli=_int(path, line, "cpu_milli", row[col["cpu_milli"]]),
                memory_mib=_int(path, line, "memory_mib", row[col["memory_mib"]]),
                num_gpu=gpus,
                model=model if gpus > 0 else "",
            )
        )
    if not nodes:
        raise DataError(f"{path}: no nodes")
    if not any(node.num_gpu > 0 for node in nodes):
        raise DataError(f"{path}: {_NO_GPU_NODE}")
    return nodes


def load_pods(path: str | Path) -> list[OpenbPod]:
    """Read an openb pod list (``name,cpu_milli,memory_mib,num_gpu,gpu_milli[,gpu_spec]``).

    ``gpu_milli`` is ignored (0) for pods without GPUs, of any size, but must still be a
    plain integer (``abc`` there was taken); ``gpu_spec`` is ``|``-separated. A row may
    end in empty fields beyond the header, or stop before optional columns (read as empty),
    as :func:`_fit_row` reads it; the node list's rows too.
    """
    path = Path(path)
    required = POD_COLUMNS
    header, rows = _read_rows(path, "--pods")
    col = {name: i for i, name in enumerate(header)}
    spec_col = col.get("gpu_spec")
    pods: list[OpenbPod] = []
    lines: dict[str, int] = {}  # each pod's name, and the line it is on
    for line, row in rows:
        if not row:
            continue
        row = _fit_row(path, line, header, row, required)
        name = _unique_name(path, line, row[col["name"]], lines, "pod")
        num_gpu = _int(path, line, "num_gpu", row[col["num_gpu"]])
        if num_gpu:
            milli = _int(path, line, "gpu_milli", row[col["gpu_milli"]])
        else:  # not used, so not bounded; but a number all the same (abc was taken)
            _check_plain_integer(path, line, "gpu_milli", row[col["gpu_milli"]])
            milli = 0
        if num_gpu and not 0 < milli <= 1000:
            raise DataError(f"{path}, line {line}, column gpu_milli: {milli} not in 1..1000")
        if num_gpu > 1 and milli != 1000:
            raise DataError(
                f"{path}, line {line}, column gpu_milli: a {num_gpu}-GPU pod must take whole GPUs"
            )
        spec_text = row[spec_col] if spec_col is not None and num_gpu else ""
        spec = frozenset(s.strip() for s in spec_text.split("|") if s.strip())
        request = ShareRequest(
            cpu_milli=_int(path, line, "cpu_milli", row[col["cpu_milli"]]),
            memory_mib=_int(path, line, "memory_mib", row[col["memory_mib"]]),
            num_gpu=num_gpu,
            gpu_milli=milli,
            gpu_spec=spec,
        )
        pods.append(OpenbPod(name, request, f"{path}, line {line}"))
    if not pods:
        raise DataError(f"{path}: no pods")
    return pods


def match_gpu_specs(pods: Sequence[OpenbPod], nodes: Sequence[ShareNode]) -> list[OpenbPod]:
    """``pods`` with each ``gpu_spec`` name spelled as the node list spells the model,
    matched whatever the case (``t4`` is ``T4``; the scheduler lowercases GPU types).

    A name that is no model of the node list is dropped when another name matches (no
    node has it); a pod whose spec matches none could run nowhere (it used to fail
    silently, as every copy of it did) and is a :class:`DataError` naming its line and
    the node list's models. Pods whose spec is already spelled alike are returned as
    they are."""
    spelled: dict[str, list[str]] = {}
    for model in sorted({n.model for n in nodes if n.num_gpu > 0 and n.model}):
        spelled.setdefault(model.casefold(), []).append(model)
    matched: dict[frozenset[str], frozenset[str]] = {}
    out: list[OpenbPod] = []
    for pod in pods:
        spec = pod.request.gpu_spec
        if not spec or pod.request.num_gpu == 0:
            out.append(pod)
            continue
        names = matched.get(spec)
        if names is None:
            names = frozenset(m for s in spec for m in spelled.get(s.casefold(), ()))
            matched[spec] = names
        if not names:
            where = pod.source or f"pod {pod.name!r}"
            have = ", ".join(sorted({m for ms in spelled.values() for m in ms})) or "none"
            raise DataError(
                f"{where}, column gpu_spec: {'|'.join(sorted(spec))!r} names no GPU model "
                f"of the node list (its models: {have}), so the pod could run nowhere; name "
                "one of them (several separated by |) or leave gpu_spec empty for any model"
            )
        if names == spec:
            out.append(pod)
        else:
            request = replace(pod.request, gpu_spec=names)
            out.append(OpenbPod(pod.name, request, pod.source))
    return out


@dataclass(frozen=True, slots=True)
class SeedResult:
    """Outcome of one seed: allocation ratio (percent) and fragmentation at the load.

    ``failed_multi_gpu_pods`` counts the refused pods that asked for two or more whole
    GPUs, and ``first_multi_gpu_refusal`` is the arrived GPU demand (percent of capacity,
    with that pod) when the first of them was refused, ``None`` if none was. The
    allocation ratio does not see such refusals (later pods use the GPUs), but a cluster
    whose pods wait instead of failing would keep those pods waiting.
    """

    seed: int
    allocation_ratio: float
    frag_ratio: float
    frag_gpu_milli: float
    arrived_pods: int
    failed_pods: int
    window_pods: int
    failed_multi_gpu_pods: int = 0
    first_multi_gpu_refusal: float | None = None

    def to_json(self) -> dict[str, Any]:
        """Plain-dict form."""
        return {
            "seed": self.seed,
            "allocation_ratio": self.allocation_ratio,
            "frag_ratio": self.frag_ratio,
            "frag_gpu_milli": self.frag_gpu_milli,
            "arrived_pods": self.arrived_pods,
            "failed_pods": self.failed_pods,
            "window_pods": self.window_pods,
            "failed_multi_gpu_pods": self.failed_multi_gpu_pods,
            "first_multi_gpu_refusal": self.first_multi_gpu_refusal,
        }


@dataclass(frozen=True, slots=True)
class AllocationResult:
    """Per-seed results and their means (``allocation_ratio`` in percent)."""

    policy: str
    load: float
    seeds: tuple[int, ...]
    per_seed: tuple[SeedResult, ...]
    allocation_ratio: float
    frag_ratio: float
    wall_seconds: float = field(compare=False)
    options: Mapping[str, Any] = field(default_factory=dict)
    """The scorer's options (``danlu sim pack --option``); empty: its defaults."""
    unplaceable_pods: tuple[str, ...] = ()
    """The pods of the list that fit no node even of the empty cluster
    (:func:`unplaceable_pods`), by name in list order: every copy of them failed."""

    def to_json(self) -> dict[str, Any]:
        """Plain-dict form (JSON-serialisable)."""
        return {
            "policy": self.policy,
            "options": dict(self.options),
            "load": float(self.load),  # a NumPy float32 is no JSON number
            "seeds": list(self.seeds),
            "allocation_ratio": self.allocation_ratio,
            "frag_ratio": self.frag_ratio,
            "per_seed": [s.to_json() for s in self.per_seed],
            "unplaceable_pods": list(self.unplaceable_pods),
            "wall_seconds": self.wall_seconds,
        }


def unplaceable_pods(pods: Iterable[OpenbPod], nodes: Sequence[ShareNode]) -> list[OpenbPod]:
    """The pods that fit no node of ``nodes`` even when the cluster is empty (too much CPU
    or memory, too many GPUs, or no node of their ``gpu_spec`` models that has the rest),
    in order. The experiment keeps them, as FGD's artifact does (their demand counts as
    arrived, every copy fails: the allocation ratio is the artifact's), but such a pod is
    most likely a mistake in the list, so :func:`run_allocation_experiment` names them
    (they used to fail silently)."""
    empty = ShareCluster(list(nodes), "random")
    fits: dict[ShareRequest, bool] = {}
    out: list[OpenbPod] = []
    for pod in pods:
        fit = fits.get(pod.request)
        if fit is None:
            fit = fits[pod.request] = bool(empty.feasible(pod.request).any())
        if not fit:
            out.append(pod)
    return out


def _check_load_and_seeds(load: float, seeds: Iterable[int]) -> tuple[int, ...]:
    """The seeds as a tuple of ints (an iterator is read once, here; NumPy's integers made
    the results' :meth:`~AllocationResult.to_json` fail in ``json.dumps``); refuse a
    ``load`` that is not a finite number above 0 and at most :data:`MOST_LOAD` and a seed
    that is not a whole number >= 0, as a :class:`ConfigError`: pods are packed until the
    arrived demand reaches the load, so a NaN, infinite or huge one packed copies for ever,
    and numpy's seeding refused a negative seed with a bare ValueError (a float or a
    string, with a TypeError); and a seed named twice (its run counted twice in the
    mean)."""
    check_real("load (--load)", load, "1.0")
    if not (math.isfinite(load) and 0 < load <= MOST_LOAD):
        raise ConfigError(
            f"load (--load) must be a finite number above 0 and at most {MOST_LOAD:g}, e.g. "
            f"1.0; got {load}"
        )
    if isinstance(seeds, str | bytes) or not isinstance(seeds, Iterable):  # "42": no seeds
        raise ConfigError(
            f"seeds (--seeds) must be a list of whole numbers, e.g. [42]; got {quoted(seeds)}"
        )
    listed = tuple(seeds)
    for seed in listed:
        check_whole("seeds (--seeds)", seed, "42")
        if seed < 0:
            raise ConfigError(f"seeds (--seeds) must be whole numbers >= 0; got {seed}")
    as_ints = tuple(int(seed) for seed in listed)  # NumPy's integers broke the results' JSON
    if len(set(as_ints)) < len(as_ints):  # it would count twice in the mean
        twice = next(seed for i, seed in enumerate(as_ints) if seed in as_ints[:i])
        raise ConfigError(f"seeds (--seeds): seed {twice} is named twice; name each seed once")
    return as_ints


def _check_inputs(
    pods: Iterable[OpenbPod], nodes: Iterable[ShareNode], options: Mapping[str, Any] | None
) -> tuple[tuple[OpenbPod, ...], tuple[ShareNode, ...]]:
    """The pods and nodes as tuples (an iterator is read once, here: it was read empty by
    the second check); refuse pods, nodes or scorer options of the wrong type (given through
    the Python API), and pods or nodes of one name, as a :class:`ConfigError` naming them: a
    file name given for the pods, or a list for the options (or a number for an option's
    name), raised bare AttributeErrors and TypeErrors."""
    listed: list[tuple[Any, ...]] = []
    for what, items, kind, reader in (
        ("pods", pods, OpenbPod, "load_pods"),
        ("nodes", nodes, ShareNode, "load_nodes"),
    ):
        if isinstance(items, str | bytes | Path) or not isinstance(items, Iterable):
            raise ConfigError(
                f"{what} must be a list of {kind.__name__}s, e.g. {reader}(path); got "
                f"{type(items).__name__}"
            )
        as_tuple = tuple(items)
        for item in as_tuple:
            check_instance(f"each of {what}", item, kind)
        listed.append(as_tuple)
    pod_list, node_list = listed
    _check_unique_names(pod_list, "pod")
    _check_unique_names(node_list, "node")
    if options is not None and not isinstance(options, Mapping):
        raise ConfigError(
            f"options (--option) must be a mapping of the scorer's option names to values, "
            f"or None for its defaults; got {type(options).__name__}"
        )
    for key in options or {}:
        if not isinstance(key, str):  # the scorer takes them as keywords: a bare TypeError
            raise ConfigError(
                f"options (--option): the option name {quoted(key)} must be a string, e.g. "
                "{'alpha': 0.5}"
            )
    return pod_list, node_list


def _check_unique_names(items: Iterable[OpenbPod | ShareNode], what: str) -> None:
    """Refuse a pod or node (built in code: :func:`load_pods` and :func:`load_nodes` check
    their files' rows) whose name is empty or that of one before it, as a
    :class:`ConfigError` naming it and both places: pods and nodes are ordered by name (the
    pods before the seed shuffles them, the ties between equally scored nodes), so two of
    one name left their order, and so the result, to the list's."""
    first: dict[str, int] = {}
    for index, item in enumerate(items):
        name = item.name
        where = f"{what}s[{index}]"
        source = getattr(item, "source", "")
        if source:
            where += f" ({source})"
        if not isinstance(name, str) or not name.strip():
            raise ConfigError(
                f"{where}: the {what} name must be a non-empty string, got {quoted(name)}; "
                f"give every {what} a name"
            )
        before = first.setdefault(name, index)
        if before != index:
            raise ConfigError(
                f"{where}: {what} name {name!r} is already used by {what}s[{before}]; give "
                f"every {what} its own name"
            )


def _scorer(policy: str, typical: TypicalPods, options: Mapping[str, Any] | None) -> ShareScorer:
    """Scorer ``policy`` for the ``typical`` pods with ``options``
    (:func:`~danlu.sched.placement.share.make_scorer`); an option it refuses is a
    :class:`ConfigError` naming it as ``--option KEY=VALUE`` (:func:`option_refusal`)."""
    try:
        return make_scorer(policy, typical=typical, options=options)
    except (ConfigError, UnknownNameError) as exc:

        def build(some: Mapping[str, Any]) -> object:
            return make_scorer(policy, typical=typical, options=some)

        raise option_refusal(exc, options or {}, build) from None


def run_seed(
    pods: Iterable[OpenbPod],
    nodes: Iterable[ShareNode],
    policy: str,
    load: float,
    seed: int,
    options: Mapping[str, Any] | None = None,
) -> SeedResult:
    """One seed of the experiment (see the module docstring); ``options`` go to the
    scorer (:func:`~danlu.sched.placement.share.make_scorer`). Pods, nodes and options of
    the wrong type, and pods or nodes of one name, are a :class:`ConfigError` naming them."""
    pods, nodes = _check_inputs(pods, nodes, options)
    return _run_checked_seed(pods, nodes, policy, load, seed, options)


def _run_checked_seed(
    pods: Sequence[OpenbPod],
    nodes: Sequence[ShareNode],
    policy: str,
    load: float,
    seed: int,
    options: Mapping[str, Any] | None,
) -> SeedResult:
    """:func:`run_seed` on pods, nodes and options :func:`_check_inputs` has passed."""
    if not pods or not nodes:
        raise ConfigError("the experiment needs at least one pod and one node")
    (seed,) = _check_load_and_seeds(load, (seed,))
    by_name = sorted(match_gpu_specs(pods, nodes), key=lambda p: p.name)
    requests = [p.request for p in by_name]
    if sum(r.total_gpu_milli for r in requests) == 0:
        raise ConfigError("the pod list asks for no GPUs, so no load can be reached")
    typical = typical_pods(requests)
    node_order = sorted(range(len(nodes)), key=lambda i: nodes[i].name)
    ordered_nodes = [nodes[i] for i in node_order]
    order_rng, copy_rng, node_rng, policy_rng = (
        np.random.default_rng(s) for s in np.random.SeedSequence(seed).spawn(4)
    )
    cluster = ShareCluster(
        ordered_nodes,
        _scorer(policy, typical, options),
        rng=policy_rng,
        tie_rank=node_rng.permutation(len(ordered_nodes)),
    )
    capacity = cluster.total_gpu_milli
    if capacity == 0:
        raise ConfigError(f"the node list: {_NO_GPU_NODE}")
    target = load * 100.0
    order = order_rng.permutation(len(requests))
    arrived = 0
    failed = 0
    failed_multi = 0
    first_multi: float | None = None  # arrived percent at the first refused multi-GPU pod
    count = 0
    window: list[float] = []
    frag = (0.0, 0.0)
    frag_taken = False
    while True:
        if count < len(order):
            req = requests[int(order[count])]
        else:
            req = requests[int(copy_rng.integers(len(requests)))]
        arrived_pct = 100.0 * (arrived + req.total_gpu_milli) / capacity
        beyond = arrived_pct > target + WINDOW_PCT
        if beyond and window:
            break  # (pods larger than the window may step over the target: see below)
        count += 1
        arrived += req.total_gpu_milli
        if cluster.place(req) is None:
            failed += 1
            if req.num_gpu >= 2:
                failed_multi += 1
                first_multi = arrived_pct if first_multi is None else first_multi
        alloc_pct = 100.0 * cluster.allocated_gpu_milli() / capacity
        if arrived_pct >= target - WINDOW_PCT:
            window.append(alloc_pct)  # a pod that jumps over the window counts alone
        if not frag_taken and arrived_pct >= target:
            frag = cluster_fragmentation(cluster, typical)
            frag_taken = True
        if beyond:
            break
    if not frag_taken:  # the last pod stepped from below the target to past the window
        frag = cluster_fragmentation(cluster, typical)
    frag_milli, idle = frag
    return SeedResult(
        seed=seed,
        allocation_ratio=float(np.mean(window)),
        frag_ratio=100.0 * frag_milli / idle if idle > 0 else 0.0,
        frag_gpu_milli=frag_milli,
        arrived_pods=count,
        failed_pods=failed,
        window_pods=len(window),
        failed_multi_gpu_pods=failed_multi,
        first_multi_gpu_refusal=first_multi,
    )


def run_allocation_experiment(
    pods: Iterable[OpenbPod],
    nodes: Iterable[ShareNode],
    policy: str,
    load: float = 1.0,
    seeds: Iterable[int] = (42,),
    options: Mapping[str, Any] | None = None,
) -> AllocationResult:
    """Run the allocation experiment for each seed; deterministic for a given seed.

    Returns per-seed results and the mean allocation ratio (percent of all milli-GPU
    allocated once the arrived GPU demand reaches ``load`` x capacity), and the pods that
    fit no node even of the empty cluster (:func:`unplaceable_pods`).
    """
    seeds = _check_load_and_seeds(load, seeds)
    if not seeds:
        raise ConfigError("at least one seed is needed")
    pods, nodes = _check_inputs(pods, nodes, options)
    # check the GPU specs, the name and the options before any seed runs
    pods = match_gpu_specs(pods, nodes)
    _scorer(policy, typical_pods(p.request for p in pods), options)
    start = time.perf_counter()
    per_seed = tuple(_run_checked_seed(pods, nodes, policy, load, s, options) for s in seeds)
    wall = time.perf_counter() - start
    unplaceable = tuple(pod.name for pod in unplaceable_pods(pods, nodes))
    return AllocationResult(
        policy=policy,
        load=load,
        seeds=tuple(seeds),
        per_seed=per_seed,
        allocation_ratio=float(np.mean([s.allocation_ratio for s in per_seed])),
        frag_ratio=float(np.mean([s.frag_ratio for s in per_seed])),
        wall_seconds=wall,
        options=dict(options or {}),
        unplaceable_pods=unplaceable,
    )
