"""Admission: the schedulable request of a spec, and the reasons a spec can never run here."""

from __future__ import annotations

from danlu.core.cluster import MILLI_PER_GPU, Cluster, gpu_type_names
from danlu.core.errors import SpecError, UnknownNameError
from danlu.core.spec import AUTO_FAMILY, NO_GPUS, JobSpec, file_url_path
from danlu.core.units import format_bytes
from danlu.sched.quota import minimum_usage
from danlu.sched.quota_limits import alone_excess
from danlu.sched.share_size import allowed_sizes
from danlu.sched.view import JobRequest
from danlu.server.db.models import Project, User
from danlu.server.errors import AdmissionError
from danlu.server.services import user_quotas
from danlu.server.services.projects import project_quota


def canonical_gpu_types(spec: JobSpec, cluster: Cluster, *, strict: bool = True) -> frozenset[str]:
    """The spec's ``gpu_type`` names as the inventory's types, in its spelling: a name as
    the inventory spells it in any case, and each type of the inventory that a name danlu
    knows stands for (:func:`~danlu.core.cluster.gpu_type_names`: ``a100-40`` ->
    ``A100-40GB``; ``A100``, a model without its size, -> each of ``A100-40GB`` and
    ``A100-80GB`` the inventory has). A known name of which the inventory has no type is kept
    as written, matching no GPU (:func:`never_fits` names it as the user wrote it).

    A name neither danlu nor the inventory knows is an :class:`AdmissionError` (a
    submission's typo); with ``strict=False`` it is kept as given, matching no GPU of this
    inventory: a job admitted while a node of that model was in it, which has left since
    (the job may still run on another type it names; the scheduler's view of it must not
    fail, nor widen to every type)."""
    present = cluster.type_spelling
    out: set[str] = set()
    for name in spec.resources.gpu_type:
        exact = present.get(name.lower())
        try:
            known = gpu_type_names(name)
        except UnknownNameError:
            if exact is None and strict:
                raise AdmissionError(
                    "resources.gpu_type",
                    f"unknown GPU type {name!r}; this cluster has "
                    f"{_types_here(cluster) or 'no GPUs'}{_list_hint(name, cluster)}",
                ) from None
            known = ()
        found = {present[kind.lower()] for kind in known if kind.lower() in present}
        if exact is not None:
            found.add(exact)
        out |= found or {name}
    return frozenset(out)


def _list_hint(name: str, cluster: Cluster) -> str:
    """For a ``gpu_type`` of several types written as one comma-separated string
    (``gpu_type: 'A100,H100'``), each part a type danlu or ``cluster`` knows: the list to
    write instead (``; write a list: [A100, H100]``); else nothing."""
    parts = [part.strip() for part in name.split(",")]
    if len(parts) < 2 or not all(parts):
        return ""
    for part in parts:
        if part.lower() in cluster.type_spelling:
            continue
        try:
            gpu_type_names(part)
        except UnknownNameError:
            return ""
    return f"; write a list: [{', '.join(parts)}]"


def _types_here(cluster: Cluster) -> str:
    """The GPU types of ``cluster``'s nodes with GPUs, in its spelling (``A100-40GB, H100``);
    empty without any."""
    kinds = sorted(
        cluster.type_spelling[kind]
        for kind, sizes in cluster.gpus_by_type.items()
        if any(sizes.values())
    )
    return ", ".join(kinds)


def gpu_milli(spec: JobSpec) -> int:
    """Compute share per GPU in thousandths (``gpu_fraction``; whole GPUs otherwise)."""
    fraction = spec.resources.gpu_fraction
    if fraction is None:
        return MILLI_PER_GPU
    return max(1, min(MILLI_PER_GPU, round(fraction * MILLI_PER_GPU)))


def build_request(
    job_id: str,
    spec: JobSpec,
    *,
    submit_time: float,
    seq: int,
    priority: int,
    gpu_memory: int | None,
    gpu_types: frozenset[str] = frozenset(),
) -> JobRequest:
    """The :class:`JobRequest` the scheduler sees for ``spec`` (``gpu_memory``: resolved
    bytes per GPU, ``None`` or 0 for whole GPUs)."""
    res = spec.resources
    gpus = res.gpus
    return JobRequest(
        id=job_id,
        submit_time=submit_time,
        gpus=gpus.min,
        max_gpus=gpus.max if gpus.elastic else 0,
        priority=priority,
        gpu_milli=gpu_milli(spec),
        gpu_memory=int(gpu_memory or 0),
        gpu_types=gpu_types or frozenset(res.gpu_type),
        cpu_milli=int(res.cpus * 1000),
        memory=res.memory,
        preemptible=spec.preemptible,
        # the user's estimate, else the time limit as its bound (as Slurm's backfill reads
        # --time): what sjf and value-density rank by
        expected_duration=spec.training.expected_duration or spec.time_limit,
        project=spec.project,
        user=spec.user,
        seq=seq,
        batch_size=spec.training.global_batch_size,
        family=known_family(spec),
    )


def known_family(spec: JobSpec) -> str:
    """The spec's model family for the scheduler: ``""`` when unset or still ``auto`` (not
    inferred: the interference model then uses its median pair)."""
    family = spec.training.family or ""
    return "" if family == AUTO_FAMILY else family


def check_spec_shape(spec: JobSpec) -> None:
    """Rules on the spec itself that pydantic does not express."""
    res = spec.resources
    if res.gpus.min < 1:
        raise SpecError("resources.gpus", NO_GPUS)  # a spec built past its checks
    if not spec.command:
        raise SpecError("command", "this field is required: the argv list to run")
    # a gpu_fraction of several GPUs, training.family auto without a model, a checkpoint_dir
    # file:// URL of a relative path, names no project, user or GPU type has, and control
    # characters in the spec's names and paths: refused by core's check_limits, which every
    # submission runs first (jobs.submit, a sweep's trials by parse_spec)


def relative_file_url(checkpoint_dir: str) -> bool:
    """Whether a spec's ``checkpoint_dir`` is a file URL that names no directory of this
    machine (:func:`~danlu.core.file_url.file_url_path`: a relative path, ``file://ckpt/run1``
    or ``file://~/ckpt``, another host, no path). Older danlu.train wrote to the text after
    ``file://``, relative to the job's working directory, which the control plane does not
    know: the retention could not tell the directory it names, and deleted it with the job
    whose directory it was when it lay under the home. Refused at submission (by
    :func:`~danlu.core.spec.check_limits`, which ``parse_spec(stored=True)`` skips); a spec
    stored before is launched with a directory of the job's own, as one naming a relative
    path is. ``file://localhost/ckpt`` and ``file:/ckpt`` name ``/ckpt``."""
    path = file_url_path(checkpoint_dir)
    return path is not None and not path.startswith("/")


def never_fits(request: JobRequest, cluster: Cluster) -> AdmissionError | None:
    """Why ``request`` can never run on ``cluster`` (empty of other jobs), or ``None``."""
    wanted = bool(request.gpu_types)
    sizes = allowed_sizes(request, cluster)
    kinds = f" of type {', '.join(sorted(request.gpu_types))}" if wanted else ""
    total = sum(sizes.values())
    if total == 0:
        if not wanted:
            return AdmissionError(
                "resources.gpus", "the cluster has no GPUs (no inventory reported yet)"
            )
        here = _types_here(cluster)
        fix = (
            f"; it has {here}: name one of them, or leave gpu_type out for any"
            if here
            else " (no inventory reported yet)"
        )
        return AdmissionError("resources.gpu_type", f"the cluster has no GPUs{kinds}{fix}")
    if request.gpus > total:
        return AdmissionError(
            "resources.gpus", f"asks for {request.gpus} GPUs; the cluster has {total}{kinds}"
        )
    if request.gpu_memory:
        biggest = max(sizes)
        if request.gpu_memory > biggest:
            return AdmissionError(
                "resources.gpu_memory",
                f"asks for {format_bytes(request.gpu_memory)} per GPU; the largest GPU{kinds} "
                f"has {format_bytes(biggest)}",
            )
        big_enough = sum(gpus for memory, gpus in sizes.items() if memory >= request.gpu_memory)
        if request.gpus > big_enough:
            return AdmissionError(
                "resources.gpus",
                f"asks for {request.gpus} GPUs with {format_bytes(request.gpu_memory)} each; "
                f"the cluster has {big_enough} such GPUs{kinds}",
            )
    return None


def check_quota(
    request: JobRequest, project: Project, cluster: Cluster, owner: User | None = None
) -> None:
    """Reject a request that alone exceeds its project's quota, or the GPU quota of its
    ``owner`` (``users.quota_gpus``): it could never start. Checked at submission only: a
    quota lowered later leaves the jobs already accepted waiting, not failed."""
    least = minimum_usage(request, cluster)
    quotas = [project_quota(project)]
    if owner is not None and owner.quota_gpus is not None:
        quotas.append(
            user_quotas.as_quota(
                user_quotas.UserQuota(owner.id, owner.name, float(owner.quota_gpus))
            )
        )
    for quota in quotas:
        refused = alone_excess(quota, least)
        if refused is not None:
            field, said = refused
            raise AdmissionError(field, f"can never start: {said}")
