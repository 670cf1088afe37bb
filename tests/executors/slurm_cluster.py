"""A real Slurm cluster for the tests: Debian's ``slurm-wlm`` (``slurmctld`` and two
``slurmd``, nodes ``n1`` and ``n2`` of 4 fake GPUs each on this host) and ``munge``, started
in a temporary directory on free ports and stopped afterwards.

The fake GPUs are character devices made with ``mknod`` (``/dev/null``'s numbers), named in
``gres.conf`` as a real node's ``/dev/nvidia*`` would be. Without the daemons the tests are
skipped, or fail when ``DANLU_TEST_REQUIRE_SLURM`` is set (CI installs ``slurm-wlm``)."""

from __future__ import annotations

import getpass
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

import pytest

from danlu.executors.slurm import SlurmExecutor
from danlu.executors.slurmctl import SlurmCommands

NODES = ("n1", "n2")
GPUS_PER_NODE = 4
DAEMONS = ("munged", "slurmctld", "slurmd")


def _which(name: str) -> str | None:
    return shutil.which(name) or next(
        (p for p in (f"/usr/sbin/{name}", f"/usr/bin/{name}") if Path(p).exists()), None
    )


def available() -> bool:
    """True when munge and Slurm's daemons are installed; fails the test when they are not
    and ``DANLU_TEST_REQUIRE_SLURM`` is set."""
    missing = [d for d in (*DAEMONS, "sbatch") if _which(d) is None]
    if missing and os.environ.get("DANLU_TEST_REQUIRE_SLURM"):
        pytest.fail(f"Slurm is required: apt-get install -y slurm-wlm munge ({missing} missing)")
    return not missing


def _free_ports(count: int) -> list[int]:
    socks = []
    for _ in range(count):
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        socks.append(sock)
    ports = [int(s.getsockname()[1]) for s in socks]
    for sock in socks:
        sock.close()
    return ports


@dataclass
class SlurmCluster:
    """A running test cluster: ``env`` runs Slurm's commands against it."""

    root: Path
    conf: Path
    env: dict[str, str]

    def run(self, *argv: str) -> str:
        """One Slurm command's output (raises on failure)."""
        done = subprocess.run(argv, env=self.env, capture_output=True, text=True, check=True)
        return done.stdout

    @contextmanager
    def partition_down(self) -> Iterator[None]:
        """The partition ``State=DOWN`` (Slurm queues its jobs and starts none), UP after."""
        self.run("scontrol", "update", "PartitionName=gpu", "State=DOWN")
        try:
            yield
        finally:
            self.run("scontrol", "update", "PartitionName=gpu", "State=UP")


def _conf(root: Path, user: str, ports: list[int], socket_path: Path, extra: str = "") -> str:
    nodes = "\n".join(
        f"NodeName={name} NodeHostname=localhost NodeAddr=127.0.0.1 Port={ports[i + 1]} "
        f"CPUs=2 RealMemory=1000 Gres=gpu:{GPUS_PER_NODE}"
        for i, name in enumerate(NODES)
    )
    return f"""ClusterName=danlutest
SlurmctldHost=localhost
SlurmUser={user}
SlurmdUser={user}
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={socket_path}
SlurmctldPort={ports[0]}
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool/%n
SlurmctldPidFile={root}/slurmctld.pid
SlurmdPidFile={root}/slurmd-%n.pid
SlurmctldLogFile={root}/log/slurmctld.log
SlurmdLogFile={root}/log/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
GresTypes=gpu
MpiDefault=none
ReturnToService=2
SchedulerType=sched/backfill
MinJobAge=600
KillWait=1
InactiveLimit=0
{nodes}
PartitionName=gpu Nodes={",".join(NODES)} Default=YES MaxTime=INFINITE State=UP \
OverSubscribe=FORCE:8
{extra}"""


@contextmanager
def slurm_cluster(root: Path, extra_conf: str = "") -> Iterator[SlurmCluster]:
    """Start munge and Slurm under ``root``, ``extra_conf`` added to ``slurm.conf`` (lines of
    settings, such as a ``Prolog``); stop them on exit."""
    for sub in ("state", "log", "munge", *(f"spool/{n}" for n in NODES)):
        (root / sub).mkdir(parents=True, exist_ok=True)
    user = getpass.getuser()
    key = root / "munge" / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o400)
    sock = root / "munge" / "socket"
    munged = [
        _which("munged") or "munged",
        f"--key-file={key}",
        f"--socket={sock}",
        f"--pid-file={root}/munge/munged.pid",
        f"--seed-file={root}/munge/seed",
        f"--log-file={root}/munge/munged.log",
    ]
    if os.geteuid() == 0:
        munged.append("--force")
    subprocess.run(munged, check=True, capture_output=True)
    devices = []
    for i in range(GPUS_PER_NODE):
        dev = root / f"nvidia{i}"
        try:
            os.mknod(dev, 0o666 | 0o020000, os.makedev(1, 3))
        except PermissionError:
            pytest.skip("mknod is not permitted here; the fake GPUs need it")
        devices.append(dev)
    ports = _free_ports(1 + len(NODES))
    conf = root / "slurm.conf"
    conf.write_text(_conf(root, user, ports, sock, extra_conf))
    (root / "gres.conf").write_text(
        "".join(f"NodeName={n} Name=gpu File={root}/nvidia[0-{GPUS_PER_NODE - 1}]\n" for n in NODES)
    )
    env = {"SLURM_CONF": str(conf), "PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    cluster = SlurmCluster(root, conf, env)
    try:
        subprocess.run([_which("slurmctld") or "slurmctld", "-c"], env=env, check=True)
        for name in NODES:
            subprocess.run([_which("slurmd") or "slurmd", "-N", name], env=env, check=True)
        deadline = time.monotonic() + 30
        while True:
            states = cluster.run("sinfo", "-h", "-N", "-o", "%N %T").split("\n")
            if sum("idle" in line for line in states) == len(NODES):
                break
            if time.monotonic() > deadline:
                logs = "\n".join(p.read_text()[-2000:] for p in (root / "log").iterdir())
                raise AssertionError(f"Slurm nodes never became idle: {states}\n{logs}")
            time.sleep(0.2)
        yield cluster
    finally:
        # read before the shutdown: a daemon removes its pid file as it exits, and one that
        # hung after that was left running
        pid_files = [root / "slurmctld.pid", *(root / f"slurmd-{n}.pid" for n in NODES)]
        pids = [_pid(pid_file) for pid_file in pid_files]
        subprocess.run(["scontrol", "shutdown"], env=env, capture_output=True, check=False)
        for pid in pids:
            _wait_gone(pid)
        for pid in _step_daemons(conf):  # their slurmd is gone: none ends them now
            with suppress(ProcessLookupError):
                os.kill(pid, 9)
        subprocess.run([munged[0], "--stop", f"--socket={sock}"], capture_output=True, check=False)


def _pid(pid_file: Path) -> int | None:
    """The pid in ``pid_file``, None when it cannot be read."""
    try:
        return int(pid_file.read_text().strip())
    except (OSError, ValueError):
        return None


def _step_daemons(conf: Path) -> list[int]:
    """The ``slurmstepd`` processes of the cluster of ``conf`` (their ``SLURM_CONF``)."""
    found = []
    wanted = f"SLURM_CONF={conf}".encode()
    for entry in Path("/proc").iterdir():
        try:
            step = entry.name.isdigit() and (entry / "comm").read_text().strip() == "slurmstepd"
            if step and wanted in (entry / "environ").read_bytes().split(b"\0"):
                found.append(int(entry.name))
        except OSError:
            continue
    return found


def _wait_gone(pid: int | None, timeout: float = 10.0) -> None:
    """Wait for the daemon ``pid`` to exit; kill it when it does not."""
    if pid is None:
        return
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)
    with suppress(ProcessLookupError):
        os.kill(pid, 9)


SRC = str(Path(__file__).resolve().parents[2] / "src")
"""The checkout's code, for the job's processes on the cluster's node."""

CHECKPOINTS = (
    "import signal, sys, time\n"
    "signal.signal(signal.SIGTERM, lambda *_: (print('got SIGTERM', flush=True), sys.exit(75)))\n"
    "print('ready', flush=True)\n"
    "time.sleep(120)\n"
)
"""A job that says ``ready``, then checkpoints (prints ``got SIGTERM``, exits 75) at a SIGTERM."""


def executor_on(cluster: SlurmCluster, state: Path) -> SlurmExecutor:
    """A Slurm executor on ``cluster``'s ``gpu`` partition, its records under ``state``,
    polling at every call."""
    commands = SlurmCommands(cluster.env)
    base = {"PATH": cluster.env["PATH"], "PYTHONPATH": SRC}
    return SlurmExecutor(commands, state, partition="gpu", base_env=base, poll_interval=0.0)
