"""Slurm's client commands (``sbatch``, ``squeue``, ``scontrol``, ``scancel``), run as argv
lists (never through a shell), and the parsing of what they print.

:class:`SlurmCommands` is the only place danlu talks to Slurm; :class:`~danlu.executors.slurm.
SlurmExecutor` builds on it. The environment the commands run with is given (``SLURM_CONF``
names the cluster's configuration when it is not in ``/etc/slurm``); this module reads none,
and sets ``SLURM_TIME_FORMAT`` in it for the commands whose output it reads
(:func:`reading_env`).
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import subprocess
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from danlu.executors.base import SIGNAL_LIMIT
from danlu.executors.errors import ExecutorError, ExecutorUnavailableError

log = logging.getLogger(__name__)

MiB = 1024**2

RUNNING_STATES = frozenset(
    {
        "PENDING",
        "CONFIGURING",
        "POWER_UP_NODE",
        "RUNNING",
        "COMPLETING",
        "SUSPENDED",
        "REQUEUED",
        "REQUEUE_FED",
        "REQUEUE_HOLD",
        "SPECIAL_EXIT",
        "RESIZING",
        "SIGNALING",
        "STAGE_OUT",
        "STOPPED",
        "RESV_DEL_HOLD",
        "UPDATE_DB",
        "EXPEDITING",
        "LAUNCH_FAILED",
        "RECONFIG_FAIL",
    }
)
"""Slurm job states in which the job may still hold (or be about to hold, or hold again once
released) its nodes. ``COMPLETING`` is among them: its processes may still be ending; so are
the held requeued ones (``REQUEUE_HOLD``, ``SPECIAL_EXIT``: a release runs them again) and
the flags Slurm sets while it launches or requeues a job (``LAUNCH_FAILED``,
``RECONFIG_FAIL``, ``POWER_UP_NODE``, ``UPDATE_DB``, ``EXPEDITING``)."""

HELD_STATES = frozenset({"REQUEUE_HOLD", "SPECIAL_EXIT", "RESV_DEL_HOLD"})
"""The :data:`RUNNING_STATES` of a job Slurm holds: requeued and held (``REQUEUE_HOLD``, by
``scontrol requeuehold``; ``SPECIAL_EXIT``, as an epilog sets for an exit code it names) or
held once its reservation was deleted (``RESV_DEL_HOLD``). Nothing of it runs, and it runs
(again) only once someone releases it (``scontrol release``); the Slurm executor gives it up
after its ``pending_limit`` (:mod:`danlu.executors.slurm_waiting`)."""

ENDED_STATES = frozenset(
    {
        "COMPLETED",
        "CANCELLED",
        "FAILED",
        "TIMEOUT",
        "NODE_FAIL",
        "BOOT_FAIL",
        "DEADLINE",
        "OUT_OF_MEMORY",
        "PREEMPTED",
        "REVOKED",
    }
)
"""Slurm job states in which the job is over on this cluster: the only ones that end a run
(``PREEMPTED`` too: danlu submits with ``--no-requeue``; ``REVOKED``: a federation sibling
that another cluster runs). Any other state, an empty one or one a newer Slurm adds, is not
taken as the job's end (:attr:`SlurmJob.running`): a job Slurm has ended is forgotten after
its ``MinJobAge``, and the run then ends as one Slurm no longer knows."""

CLOSED_NODE_STATES = frozenset(
    {
        "DOWN",
        "DRAIN",
        "DRAINED",
        "DRAINING",
        "FAIL",
        "FAILING",
        "NOT_RESPONDING",
        "INVAL",
        "INVALID_REG",
    }
)
"""The parts of a node's state (``scontrol show node``: a base state and ``+FLAG``s, as
``IDLE+DRAIN``) that close it to new work (:func:`node_closed`). The power-saving flags
are not among them: ``POWERED_DOWN``, ``POWERING_DOWN``, ``POWER_DOWN`` and
``POWERING_UP`` (with ``CLOUD`` on cloud nodes) mark a node the controller boots when a job
is given to it, capacity that is there."""


def node_closed(state: str) -> bool:
    """Whether a node in ``state`` takes no new work: one of its ``+``-joined parts, without
    the mark ``sinfo`` appends (``*``, ``~``, ``#``...), is in :data:`CLOSED_NODE_STATES`.
    Whole parts: the ``DOWN`` in ``IDLE+POWERED_DOWN`` (a node powered off by Slurm's power
    saving, which it boots on demand) does not close it; ``DOWN+POWERED_DOWN`` and
    ``IDLE+DRAIN+POWERED_DOWN`` are closed."""
    parts = (part.strip().rstrip("*~#%!$@^-+") for part in state.upper().split("+"))
    return any(part in CLOSED_NODE_STATES for part in parts)


NODE_LOST_STATES: Mapping[str, str] = {"NODE_FAIL": "failed", "BOOT_FAIL": "failed to boot"}
"""The ended states of a job lost with its node (what befell the node): the job is re-queued
to resume, as a preemption. ``BOOT_FAIL``: Slurm could not boot a node to start it on, so it
never ran (``ExitCode=0:0``, no exit)."""

LAUNCH_FAILURE = "JobLaunchFailure"
"""The ``Reason`` of a batch job Slurm could not launch on its node (its ``--output`` could
not be opened there, the user unknown there): its ``ExitCode`` (``0:53``) is an error number
of Slurm's, not a signal."""

_KEY = re.compile(r"(?:^|\s)([A-Za-z][A-Za-z0-9_:/.]*)=")
_USER_ID = re.compile(r"^(.*)\((\d+)\)$")
"""A job's ``UserId`` in ``scontrol show job``: the user's name and, in brackets, its id
(``alice(1000)``; ``nobody(4242)`` or ``(null)(4242)`` where the host cannot name it)."""
_REASON_STAMP = re.compile(r"\[[^\]\s@]+@\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\]")
"""The ``[user@2026-11-29T04:58:05]`` Slurm appends to a node's ``Reason``."""
# name[:type][:no_consume]:count, as slurm.conf writes a node's Gres; a type is never the
# word no_consume (``gpu:no_consume:4`` is four GPUs of no type, not 0).
_GRES_ITEM = re.compile(r"^gpu(?::(?!no_consume:)([^:(]+))?(?::no_consume)?:(\d+)")


class SlurmError(ExecutorError):
    """A Slurm command failed or printed what danlu cannot read; the message holds its
    argv and what it said."""


class SlurmUnavailableError(SlurmError, ExecutorUnavailableError):
    """A Slurm command could not reach the controller, timed out or could not be started."""


class SbatchUnreadError(SlurmError):
    """``sbatch`` succeeded (exit 0: Slurm took the job) but printed no job id danlu can
    read: the job is in Slurm, under its name, with an id danlu does not know."""


_UNREACHABLE = re.compile(
    r"Unable to contact slurm controller|Socket timed out|Connection refused|"
    r"Zero Bytes were transmitted|Communication connection failure|Unable to connect",
    re.IGNORECASE,
)


@dataclass(frozen=True, slots=True)
class SlurmNode:
    """One node as ``scontrol show node`` describes it."""

    name: str
    address: str
    """``NodeAddr``: where other nodes reach it (the rendezvous host of a multi-node job)."""
    gpus: int
    gpu_type: str | None
    """The GPU type named in its ``Gres`` (``gpu:a100:4`` -> ``a100``), if any."""
    cpus: int
    memory: int
    """``RealMemory`` in bytes."""
    state: str
    reason: str = ""
    """``Reason``: why an admin or Slurm drained or downed it (empty: none given)."""


@dataclass(frozen=True, slots=True)
class SlurmJob:
    """What ``squeue`` or ``scontrol show job`` tells of one job."""

    job_id: int
    state: str
    reason: str = ""
    exit_code: int | None = None
    """The batch script's exit status; 128 + N when it died from signal N."""
    signal: int | None = None
    started_at: float | None = None
    finished_at: float | None = None
    name: str | None = None
    """The job's name (``danlu.JOB_ID.ATTEMPT`` for danlu's runs); None where it was not
    read."""
    user: str | None = None
    """The name of the user it runs as (``squeue``'s ``%u``, ``scontrol``'s ``UserId``);
    None where it was not read."""
    uid: str | None = None
    """That user's numeric id (``%U``, the bracketed id of ``UserId``); None where it was not
    read."""
    node_list: str = ""
    """The nodes it runs on (``scontrol``'s ``NodeList``, a Slurm hostlist: ``n[1-3]``), or,
    not started yet, those it asked for (``ReqNodeList``); empty when neither is known (or
    not read: ``squeue``'s)."""
    suspend_time: float | None = None
    """When Slurm last suspended or resumed it (``scontrol``'s ``SuspendTime``, to the
    second): of a running job, its last resume. None when it never was, or not read
    (``squeue``'s)."""

    @property
    def running(self) -> bool:
        """True while Slurm may still run (or start) it: in any state but the
        :data:`ENDED_STATES`, one danlu does not know (:attr:`known`) included."""
        return self.state not in ENDED_STATES

    @property
    def known(self) -> bool:
        """Whether its state is one danlu knows (:data:`RUNNING_STATES`,
        :data:`ENDED_STATES`); an empty one is not."""
        return self.state in RUNNING_STATES or self.state in ENDED_STATES


def parse_fields(line: str) -> dict[str, str]:
    """``Key=value`` pairs of one line of ``scontrol show ... --oneliner`` output. A value
    runs to the next `` Key=``, so values with spaces (a reason, a path) stay whole. A
    node's ``Reason`` runs to the ``[user@time]`` Slurm appends to it, so an admin's free
    text holding ``=`` (``GPU xid=79``) stays whole too rather than ending the reason.

    A key given twice keeps its first value. Slurm prints each key of a node or job once
    (``scontrol show`` without ``--details``, which repeats a job's ``Nodes=`` per node
    allocation and which danlu does not ask for), and prints the keys danlu reads before
    the free text that an admin or user writes: a node's ``Reason``, ``Comment`` and
    ``Extra``, a job's ``Command``, ``WorkDir``, ``Comment`` and output paths. A second
    ``State=`` can only be such text (``Comment=was State=DOWN``, ``Extra=State=IDLE``),
    which took the node's or job's place when the last value was kept."""
    matches = list(_KEY.finditer(line))
    out: dict[str, str] = {}
    i = 0
    while i < len(matches):
        match = matches[i]
        end = matches[i + 1].start() if i + 1 < len(matches) else len(line)
        if match.group(1) == "Reason":
            stamp = _REASON_STAMP.search(line, match.end())
            if stamp is not None and stamp.start() > end:  # the reason's text holds a "="
                end = stamp.end()
                while i + 1 < len(matches) and matches[i + 1].start() < end:
                    i += 1
        out.setdefault(match.group(1), line[match.end() : end].strip())
        i += 1
    return out


def parse_gres(gres: str) -> tuple[int, str | None]:
    """The GPU count and type of a node's ``Gres`` (``gpu:4``, ``gpu:a100:4(S:0-1)``,
    ``gpu:a100:2,gpu:a100:2``, ``gpu:a100:no_consume:4``; ``(null)`` is no GPU). Types
    differing on one node: the first one's."""
    count, kind = 0, None
    for item in gres.split(","):
        match = _GRES_ITEM.match(item.strip())
        if match:
            count += int(match.group(2))
            kind = kind or match.group(1)
    return count, kind


def _job_id(text: str) -> int | None:
    """``text`` as a Slurm job id, or None when it is not one (an array task's ``12_3``, a
    heterogeneous job's ``12+0``, a warning). ASCII digits only: ``str.isdigit`` also takes
    ``²``, which ``int`` refuses."""
    return int(text) if text.isascii() and text.isdigit() else None


def _int(text: str | None, default: int = 0) -> int:
    try:
        return int(text) if text is not None else default
    except ValueError:
        return default


def _time(text: str | None) -> float | None:
    """Seconds since the epoch of a Slurm time stamp (local time, ``2026-11-29T04:58:05``);
    None for ``Unknown``, ``None`` or anything else."""
    if not text:
        return None
    try:
        return datetime.strptime(text, "%Y-%m-%dT%H:%M:%S").timestamp()
    except ValueError:
        return None


def node_from_fields(fields: Mapping[str, str]) -> SlurmNode:
    """A :class:`SlurmNode` from one node's ``scontrol show node`` fields."""
    gpus, kind = parse_gres(fields.get("Gres", ""))
    name = fields.get("NodeName", "")
    if not name:
        raise SlurmError(f"a node without NodeName in scontrol's output: {dict(fields)}")
    return SlurmNode(
        name=name,
        address=fields.get("NodeAddr") or fields.get("NodeHostName") or name,
        gpus=gpus,
        gpu_type=kind,
        cpus=_int(fields.get("CPUTot")),
        memory=_int(fields.get("RealMemory")) * MiB,
        state=fields.get("State", ""),
        reason=_node_reason(fields.get("Reason", "")),
    )


def _node_reason(text: str) -> str:
    """A node's ``Reason``, without the ``[user@time]`` Slurm appends (``none``: none)."""
    text = re.sub(r"\s*\[[^\]]*@[^\]]*\]\s*$", "", text).strip()
    return "" if text.lower() in ("", "none", "(null)") else text


def job_from_fields(fields: Mapping[str, str]) -> SlurmJob:
    """A :class:`SlurmJob` from one job's ``scontrol show job`` fields: ``ExitCode=75:0``
    is exit 75, ``0:9`` a death from signal 9 (exit status 137); a job Slurm could not
    launch (``Reason=JobLaunchFailure``, :data:`LAUNCH_FAILURE`) has neither, whatever its
    ``ExitCode`` holds, and nor has one whose status is no exit status (above 255) or whose
    signal is no signal (:data:`~danlu.executors.base.SIGNAL_LIMIT` or above: ``0:300`` is
    not exit 428; ``0:125``, which Slurm records for a job its cgroup killed out of memory,
    ``OUT_OF_MEMORY``, not exit 253)."""
    code: int | None = None
    sig: int | None = None
    exit_field = fields.get("ExitCode", "")
    reason = fields.get("Reason", "")
    if ":" in exit_field and reason != LAUNCH_FAILURE:
        status, number = (_int(part, -1) for part in exit_field.split(":", 1))
        if 0 < number < SIGNAL_LIMIT:
            sig, code = number, 128 + number
        elif number <= 0 and 0 <= status <= 255:
            code = status
    state = fields.get("JobState", "").split()[0] if fields.get("JobState") else ""
    user, uid = _user_id(fields.get("UserId"))
    return SlurmJob(
        job_id=_int(fields.get("JobId"), -1),
        state=state,
        reason=reason,
        exit_code=code,
        signal=sig,
        started_at=_time(fields.get("StartTime")),
        finished_at=_time(fields.get("EndTime")),
        name=fields.get("JobName"),
        user=user,
        uid=uid,
        node_list=next(
            (
                listed
                for key in ("NodeList", "ReqNodeList")
                if (listed := fields.get(key, "").strip()) not in ("", "(null)", "None")
            ),
            "",
        ),
        suspend_time=_time(fields.get("SuspendTime")),
    )


def _user_id(text: str | None) -> tuple[str | None, str | None]:
    """The user's name and numeric id of a job's ``UserId`` (``alice(1000)``); a name of
    ``(null)`` or none is None, and so are both when the field is missing or unreadable."""
    match = _USER_ID.match(text.strip()) if text else None
    if match is None:
        return None, None
    name = match.group(1).strip()
    return (name if name not in ("", "(null)") else None), match.group(2)


def _squeue_job(line: str) -> SlurmJob | None:
    """One line of :meth:`SlurmCommands.jobs`'s ``squeue`` (``%i|%T|%S|%U|%u|%j|%r``) as a
    job, None when it is none (a warning, an array task). The user and the name come before
    the reason: neither a user's name nor danlu's job names hold a ``|``, so they read whole
    whatever the reason holds. A line without the user's fields (``%i|%T|%S|%j|%r``) has no
    user, and one of four fields (``%i|%T|%S|%r``) has no name either."""
    parts = line.strip().split("|", 6)
    user: tuple[str, str] | None = None
    if len(parts) == 7 and _job_id(parts[3]) is not None:
        user = (parts[3], parts[4])
        del parts[3:5]
    else:
        parts = line.strip().split("|", 4)
    job_id = _job_id(parts[0]) if len(parts) in (4, 5) else None
    if job_id is None:
        return None
    state, start, reason = parts[1], parts[2], parts[-1]
    # a pending job's %S is when Slurm expects to start it, if at all
    started = None if state == "PENDING" else _time(start)
    return SlurmJob(
        job_id,
        state,
        reason,
        started_at=started,
        name=parts[3] if len(parts) == 5 else None,
        uid=user[0] if user else None,
        user=user[1] if user else None,
    )


TIME_FORMAT = "SLURM_TIME_FORMAT"
"""The variable that sets how Slurm's commands print times (``relative``, an ``strftime``
format): the commands whose output danlu reads run with it ``standard``
(``2026-11-29T04:58:05``, which :func:`_time` reads)."""


def reading_env(env: Mapping[str, str] | None) -> dict[str, str] | None:
    """The environment of a Slurm command whose output danlu reads: ``env`` with
    :data:`TIME_FORMAT` ``standard``. An operator's ``SLURM_TIME_FORMAT=relative`` (or
    ``%s``) made every ``StartTime`` and ``EndTime`` unreadable: a run had no start time, and
    one cancelled while pending read as killed by SIGKILL. None (no environment given: the
    command inherits this process's, which this module does not read) stays None."""
    if env is None:
        return None
    out = dict(env)
    out[TIME_FORMAT] = "standard"
    return out


class SlurmCommands:
    """Runs Slurm's client commands with ``env`` (e.g. ``{"SLURM_CONF": ..., "PATH": ...}``)
    and a ``timeout`` in seconds; ``bin_dir`` is where they live (default: found on the
    ``PATH`` of ``env``). ``user`` is the account the jobs are submitted as, whose jobs alone
    are looked up by name (:meth:`find`, :meth:`named`; default: this process's user id, the
    one ``sbatch`` submits as). Every failure is a :class:`SlurmError` naming the command."""

    def __init__(
        self,
        env: Mapping[str, str] | None = None,
        *,
        bin_dir: str | None = None,
        timeout: float = 30.0,
        user: str | None = None,
    ) -> None:
        self._env = dict(env) if env is not None else None
        self._bin = bin_dir
        self._timeout = timeout
        self._user = user if user is not None else str(os.getuid())
        self._odd_states: set[tuple[int, str]] = set()

    def owns(self, job: SlurmJob) -> bool:
        """Whether ``job`` runs as the account danlu submits as: its user's name or id is
        that account (given either way, as ``squeue --user`` takes it). A job whose user was
        not read (a Slurm that printed none) is taken as the account's."""
        if job.user is None and job.uid is None:
            return True
        return self._user in (job.user, job.uid)

    @property
    def user(self) -> str:
        """The account danlu submits as (a user's name or numeric id)."""
        return self._user

    @property
    def env(self) -> dict[str, str]:
        """The environment the commands run with (a copy)."""
        return dict(self._env or {})

    def program(self, name: str) -> str:
        """The path of Slurm's command ``name``: in ``bin_dir``, else found on the ``PATH`` of
        the commands' own environment (never on a job's: ``sbatch`` runs with the job's
        environment, whose ``PATH`` the submitter chose); ``name`` itself when not found."""
        if self._bin:
            return f"{self._bin}/{name}"
        path = self._env.get("PATH") if self._env is not None else None
        return shutil.which(name, path=path) or name

    def run(
        self,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        stdin: str | None = None,
    ) -> str:
        """Run one Slurm command and return its standard output. The program is found as
        :meth:`program` says, whatever ``env`` (the job's, for ``sbatch``) holds. Run with
        the commands' own environment (``env`` None; one was given at construction), it
        prints its times in Slurm's standard form (:func:`reading_env`), the one danlu
        reads. ``stdin``: the text the command reads (UTF-8; None: nothing to read)."""
        command = [self.program(argv[0]), *argv[1:]]
        try:
            done = subprocess.run(
                command,
                env=dict(env) if env is not None else reading_env(self._env),
                capture_output=True,
                timeout=self._timeout,
                check=False,
                input=(stdin or "").encode(),  # none: an empty one, read to its end at once
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise SlurmUnavailableError(f"{' '.join(argv[:2])}: {exc}") from exc
        if done.returncode != 0:
            # one line: a message of several lines (a missing slurm.conf gets four) read as
            # escaped "\n"s in a CLI error and split a log record
            lines = done.stderr.decode("utf-8", "replace").splitlines()
            said = "; ".join(x.strip() for x in lines if x.strip()) or f"exit {done.returncode}"
            kind = SlurmUnavailableError if _UNREACHABLE.search(said) else SlurmError
            raise kind(f"{' '.join(argv[:2])} failed: {said}")
        return done.stdout.decode("utf-8", "replace")

    def sbatch(self, options: Sequence[str], script: str, env: Mapping[str, str]) -> int:
        """Submit the batch script ``script`` (its text, which ``sbatch`` reads on its
        standard input: no file a job could replace by a link is read) with ``options``; the
        job's environment is ``env`` (the submission's own, exported whole). Returns the
        Slurm job id: the last line of its output that is one (``--parsable``: ``ID`` or
        ``ID;CLUSTER``), after any a site's ``sbatch`` wrapper or submit plugin printed
        before it. Raises :class:`SbatchUnreadError` when no line is one, though Slurm took
        the job."""
        out = self.run(["sbatch", "--parsable", *options], env=env, stdin=script).strip()
        for line in reversed(out.splitlines()):
            job_id = _job_id(line.strip().split(";", 1)[0])
            if job_id is not None:
                return job_id
        raise SbatchUnreadError(f"sbatch printed {out!r}, not a job id")

    def jobs(self, job_ids: Iterable[int]) -> dict[int, SlurmJob]:
        """The state of each of ``job_ids`` Slurm still knows (finished ones too, until its
        ``MinJobAge``), with its name, its reason (why it is pending) and, once it has
        started, its start time; those it has forgotten are absent (``squeue -j`` fails with
        "Invalid job id" when it knows none of them: none is known then). An id is any
        job's, whoever submitted it: the caller checks the name (a job Slurm forgot leaves
        its id to a later job of any name) and the user (:meth:`owns`: another user's job
        under the run's id is none of danlu's runs). A state danlu does not
        know (empty, or one a newer Slurm adds) is kept as printed, which
        :attr:`SlurmJob.running` takes as still running; a warning is logged once per job
        and state."""
        ids = sorted(set(job_ids))
        if not ids:
            return {}
        listed = ",".join(map(str, ids))
        try:
            out = self.run(
                ["squeue", "-h", "-t", "all", "-o", "%i|%T|%S|%U|%u|%j|%r", "-j", listed]
            )
        except SlurmError as exc:
            if "Invalid job id" in str(exc):
                return {}
            raise
        found: dict[int, SlurmJob] = {}
        for line in out.splitlines():
            job = _squeue_job(line)
            if job is not None:
                job_id, state = job.job_id, job.state
                found[job_id] = job
                if not job.known and (job_id, state) not in self._odd_states:
                    self._odd_states.add((job_id, state))
                    log.warning(
                        "squeue reports Slurm job %s in state %r, which danlu does not know: "
                        "it is taken as still running until Slurm reports one of %s or "
                        "forgets the job",
                        job_id,
                        state,
                        ", ".join(sorted(ENDED_STATES)),
                    )
        return found

    def job(self, job_id: int) -> SlurmJob | None:
        """One job in full (exit code and times, its nodes, its name and user), or None when
        Slurm has forgotten it. As for :meth:`jobs`, the id is any job's, whoever submitted
        it: the caller checks the name and the user (:meth:`owns`)."""
        try:
            out = self.run(["scontrol", "show", "job", "--oneliner", str(job_id)])
        except SlurmError as exc:
            if "Invalid job id" in str(exc):
                return None
            raise
        for line in out.splitlines():
            if line.strip():
                return job_from_fields(parse_fields(line))
        return None

    def find(self, name: str) -> list[int]:
        """Ids of the jobs named ``name`` that Slurm knows, of the account danlu submits as
        (another user can name a job so: it is not danlu's to adopt, nor to cancel)."""
        out = self.run(
            ["squeue", "-h", "-t", "all", "-o", "%i", f"--user={self._user}", "-n", name]
        )
        return [job_id for x in out.split() if (job_id := _job_id(x)) is not None]

    def named(self, prefix: str) -> dict[int, tuple[str, str]]:
        """The jobs Slurm knows whose name starts with ``prefix``, of the account danlu
        submits as (another user's job of such a name is none of danlu's runs): by id, their
        name and state (``squeue`` has no prefix search; every job of the account is listed
        and filtered here). A job's name is the last field printed, so a ``|`` in it is
        kept."""
        out = self.run(["squeue", "-h", "-t", "all", "-o", "%i|%T|%j", f"--user={self._user}"])
        found: dict[int, tuple[str, str]] = {}
        for line in out.splitlines():
            parts = line.strip().split("|", 2)
            job_id = _job_id(parts[0]) if len(parts) == 3 else None
            if job_id is not None and parts[2].startswith(prefix):
                found[job_id] = (parts[2], parts[1])
        return found

    def hostnames(self, hostlist: str) -> list[str]:
        """The node names of the Slurm hostlist ``hostlist`` (``n[1-3]``: n1, n2, n3), as
        ``scontrol show hostnames`` expands it."""
        return self.run(["scontrol", "show", "hostnames", hostlist]).split()

    def nodes(self, partition: str | None = None) -> list[SlurmNode]:
        """The nodes of ``partition`` (all nodes when None), in Slurm's order."""
        names: set[str] | None = None
        if partition is not None:
            listed = self.run(["sinfo", "-h", "-N", "-p", partition, "-o", "%N"])
            names = {n.strip() for n in listed.split() if n.strip()}
            if not names:
                raise SlurmError(
                    f"partition {partition!r} does not exist or has no nodes (sinfo -p "
                    f"{partition} lists none); name one that sinfo lists "
                    "(DANLU_SLURM_PARTITION), or leave it unset for Slurm's default one"
                )
        out = self.run(["scontrol", "show", "node", "--oneliner"])
        nodes = [node_from_fields(parse_fields(line)) for line in out.splitlines() if line.strip()]
        return [n for n in nodes if names is None or n.name in names]

    def partition_state(self, partition: str) -> str:
        """What Slurm reports of ``partition`` (``sinfo``'s ``%a``, upper-cased): ``UP``;
        ``DOWN`` (jobs are taken but none is started), ``DRAIN`` (none is taken, ``sbatch``
        refuses them) or ``INACTIVE`` (neither); ``""`` when ``sinfo`` lists no such
        partition."""
        out = self.run(["sinfo", "-h", "-p", partition, "-o", "%P|%a"])
        for line in out.splitlines():
            name, _, state = line.strip().partition("|")
            if name.rstrip("*") == partition:  # "*": Slurm's default partition
                return state.strip().upper()
        return ""

    def cancel(self, job_id: int, signal: str | None = None, *, full: bool = False) -> None:
        """``scancel``: the whole job when ``signal`` is None (SIGTERM, then SIGKILL after
        the cluster's ``KillWait``), else send ``signal`` to its steps (``full``: to the
        batch script too). A job already gone is not an error."""
        argv = ["scancel"]
        if signal is not None:
            argv.append(f"--signal={signal}")
        if full:
            argv.append("--full")
        try:
            self.run([*argv, str(job_id)])
        except SlurmError as exc:
            if "Invalid job id" not in str(exc) and "already completing" not in str(exc):
                raise
