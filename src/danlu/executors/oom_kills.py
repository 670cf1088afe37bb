"""The kernel's count of OOM kills in the memory cgroup of a process: the evidence that a job
which died of SIGKILL was killed for the host's memory (the kernel's OOM killer, for the host
or for a cgroup's memory limit), not by someone's ``kill -9``.

The kernel counts, per memory cgroup, the processes in it that an OOM killer killed: cgroup
v2's ``memory.events`` (``oom_kill N``, its subtree's too), cgroup v1's ``memory.oom_control``
(``oom_kill N``, since Linux 4.13). The local executor's supervisor reads its own cgroup's
count (:class:`OomKills`), which its job's processes inherit, before it starts the job and
after the job exited: a rise is an OOM kill in the cgroup while the job ran
(:func:`~danlu.executors.base.host_oom` reads it with the job's exit).

Where the cgroup is found: ``/proc/PID/cgroup`` names it (``0::/path`` for v2,
``N:memory:/path`` for v1) and ``/proc/PID/mountinfo`` where its hierarchy is mounted (the
mount's root, a container's cgroup, taken off the path). v2's file is read where the
hierarchy has the memory controller (a hybrid host mounts v2 without it, beside v1's
``memory``), else v1's. Nothing found (no cgroup file system mounted, a kernel without the
counter, a cgroup removed meanwhile): no count, and so no evidence.

This file is loaded by its path too (the supervisor runs as a script with ``python -I``):
it imports nothing of danlu's."""

from __future__ import annotations

from pathlib import Path

V2_FILE = "memory.events"
V1_FILE = "memory.oom_control"
COUNTER = "oom_kill"
"""The counter's name in either file."""


def _cgroups(proc: Path) -> dict[str, str]:
    """The process's cgroup paths by hierarchy: ``""`` for v2's, ``"memory"`` for v1's
    memory controller (``/proc/PID/cgroup``, read from ``proc``); empty when unreadable."""
    try:
        text = (proc / "cgroup").read_text()
    except (OSError, UnicodeDecodeError):
        return {}
    found: dict[str, str] = {}
    for line in text.splitlines():
        _, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if not path.startswith("/"):
            continue
        if controllers == "":
            found.setdefault("", path)
        elif "memory" in controllers.split(","):
            found.setdefault("memory", path)
    return found


def _mounts(proc: Path) -> list[tuple[str, str, str, set[str]]]:
    """``(root, mount point, file system type, super options)`` of each cgroup file system
    mounted (``/proc/PID/mountinfo``); empty when unreadable."""
    try:
        text = (proc / "mountinfo").read_text()
    except (OSError, UnicodeDecodeError):
        return []
    mounts = []
    for line in text.splitlines():
        before, sep, after = line.partition(" - ")
        fields, tail = before.split(), after.split()
        if not sep or len(fields) < 5 or len(tail) < 3 or tail[0] not in ("cgroup", "cgroup2"):
            continue
        root, point = (_unescaped(field) for field in fields[3:5])
        mounts.append((root, point, tail[0], set(tail[2].split(","))))
    return mounts


def _unescaped(field: str) -> str:
    """A path of ``mountinfo``, whose spaces, tabs, newlines and backslashes are octal
    escapes (``\\040``)."""
    for code, char in (("\\040", " "), ("\\011", "\t"), ("\\012", "\n"), ("\\134", "\\")):
        field = field.replace(code, char)
    return field


def _within(root: str, path: str) -> str | None:
    """``path`` (a cgroup's, from ``/proc/PID/cgroup``) relative to the mount's ``root``:
    None when the mount does not show that cgroup."""
    if root == "/":
        return path.lstrip("/")
    if path == root or path.startswith(root.rstrip("/") + "/"):
        return path[len(root) :].lstrip("/")
    return None


def counter_file(pid: int | str = "self", proc_root: Path = Path("/proc")) -> Path | None:
    """The file that counts the OOM kills of process ``pid``'s memory cgroup (cgroup v2's
    ``memory.events`` where its hierarchy has the memory controller, else v1's
    ``memory.oom_control``), None when there is none to read. ``proc_root``: where ``/proc``
    is (another in tests)."""
    proc = proc_root / str(pid)
    cgroups = _cgroups(proc)
    candidates: list[Path] = []
    for root, point, kind, options in _mounts(proc):
        hierarchy = "" if kind == "cgroup2" else "memory" if "memory" in options else None
        if hierarchy is None or hierarchy not in cgroups:
            continue
        relative = _within(root, cgroups[hierarchy])
        if relative is not None:
            name = V2_FILE if kind == "cgroup2" else V1_FILE
            candidates.append(Path(point) / relative / name)
    # v2 first: the unified hierarchy, when its controller is there (a hybrid host's lacks it)
    candidates.sort(key=lambda path: path.name != V2_FILE)
    return next((path for path in candidates if read_count(path) is not None), None)


def read_count(path: Path) -> int | None:
    """The ``oom_kill`` count of the counter file ``path``; None when it cannot be read or
    has none (a kernel before 4.13, a cgroup removed)."""
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError):
        return None
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        if name == COUNTER and value.strip().isdecimal():
            return int(value)
    return None


class OomKills:
    """The OOM kills of this process's memory cgroup from now on (:meth:`since`): made
    before the job starts, in the process whose cgroup the job inherits. Never raises: the
    supervisor makes it before it starts the job, which a surprise here must not keep from
    starting (no count is no evidence)."""

    def __init__(self, pid: int | str = "self", proc_root: Path = Path("/proc")) -> None:
        try:
            self.path = counter_file(pid, proc_root)
        except Exception:  # a /proc or mount table this reading did not foresee
            self.path = None
        self.start = read_count(self.path) if self.path is not None else None

    def since(self) -> int | None:
        """The OOM kills counted since this was made; None when the count cannot be read
        (then or now), or went down (another cgroup by that name: no count to compare)."""
        if self.path is None or self.start is None:
            return None
        now = read_count(self.path)
        return now - self.start if now is not None and now >= self.start else None


def killed_message(count: int, worker: bool = False) -> str:
    """What a run's status says of a death by SIGKILL that came with ``count`` OOM kills in
    its memory cgroup (:meth:`OomKills.since`): the run's own death, or with ``worker`` a
    worker's that its launcher reported before it exited (torchrun's, whose agent exits 1)."""
    kills = "1 OOM kill" if count == 1 else f"{count} OOM kills"
    who = "a worker of it killed" if worker else "killed"
    return f"{who} by the kernel's OOM killer: its memory cgroup counted {kills} while it ran"
