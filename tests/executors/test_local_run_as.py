"""The local executor starting jobs as another OS account (``DANLU_RUN_AS=user``), run as root:
the job's processes are the account's, with its groups, home and a usual umask; it writes its
own checkpoint directory and cannot read the control plane's files; it is stopped as any job
is; no job runs as root or as an account the host lacks; and ``danlu server`` with
``DANLU_RUN_AS=user`` keeps the home private from the jobs."""

from __future__ import annotations

import os
import pwd
import shutil
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from control_plane import control_plane, server_env, wait_state
from run_helpers import wait, wait_text

from danlu.client import ApiError, Client
from danlu.core.cluster import Cluster
from danlu.executors import InvalidLaunchError, JobLaunch, LocalExecutor, Outcome, StopReason
from danlu.executors.accounts import os_account

pytestmark = pytest.mark.slow

# /bin/sh, not Python: the control plane's interpreter may sit where other accounts cannot
# reach it (a root-only pyenv), as it does on CI's machines.
REPORT = """
if cat "$SECRET" >/dev/null 2>&1; then secret=read; else secret=denied; fi
echo 1 > "$DANLU_CHECKPOINT_DIR/step"
echo "uid=$(id -u) gid=$(id -g) groups=$(id -G | tr ' ' ,) user=$USER home=$HOME"
echo "cwd=$(pwd) secret=$secret umask=$(umask) ckpt=$(stat -c %u "$DANLU_CHECKPOINT_DIR/step")"
"""
SLEEP = "echo ready; exec sleep 60"


def sh(job_id: str, script: str, **kwargs: object) -> JobLaunch:
    return JobLaunch(job_id, ("/bin/sh", "-c", script), **kwargs)  # type: ignore[arg-type]


@pytest.fixture
def ex(tmp_path: Path) -> LocalExecutor:
    return LocalExecutor(
        Cluster.homogeneous(1, 4, "A100-80GB"),
        tmp_path / "state",
        base_env={"PATH": "/usr/bin:/bin"},
        api_url="http://127.0.0.1:8080",
        cancel_grace=1.0,
    )


@pytest.fixture
def enterable() -> Iterator[Path]:
    """A directory other accounts may enter but not list (``0711``), its parents enterable too
    (pytest's own temporary directories are root's alone)."""
    path = Path(tempfile.mkdtemp(prefix="danlu-run-as-"))
    path.chmod(0o711)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def test_a_job_runs_as_its_account(ex: LocalExecutor, os_user: str, enterable: Path) -> None:
    account = os_account(os_user)
    secret = enterable / "admin.token"
    secret.write_text("dl_secret")
    secret.chmod(0o600)
    ckpt = enterable / "ckpt"
    ckpt.mkdir(mode=0o700)
    os.chown(ckpt, account.uid, account.gid)
    job = sh(
        "as-user-1",
        REPORT,
        env={"SECRET": str(secret)},
        checkpoint_dir=str(ckpt),
        run_as=os_user,
    )
    handle = ex.submit(job)
    status = wait(ex, handle)
    log = ex.logs(handle)[0].decode()
    assert status.outcome is Outcome.SUCCEEDED, log
    seen = dict(item.split("=", 1) for item in log.split() if "=" in item)
    assert (int(seen["uid"]), int(seen["gid"])) == (account.uid, account.gid)
    assert {int(g) for g in seen["groups"].split(",")} <= set(account.groups)
    assert (seen["user"], seen["home"]) == (os_user, pwd.getpwnam(os_user).pw_dir)
    assert seen["cwd"] == "/"  # its home does not exist; never the control plane's directory
    assert seen["secret"] == "denied"
    assert seen["umask"] == "0022" and int(seen["ckpt"]) == account.uid


def test_a_job_run_as_an_account_is_stopped_as_any_job(ex: LocalExecutor, os_user: str) -> None:
    handle = ex.submit(sh("as-user-2", SLEEP, run_as=os_user))
    wait_text(ex, handle, "ready")
    ex.cancel(handle)
    status = wait(ex, handle)
    assert status.outcome is Outcome.FAILED and status.stop_reason is StopReason.CANCEL


@pytest.mark.parametrize(
    ("name", "message"),
    [("root", "no job runs as root"), ("dl-nobody-here", "useradd dl-nobody-here")],
)
def test_no_job_runs_as_root_or_a_missing_account(
    ex: LocalExecutor, name: str, message: str
) -> None:
    with pytest.raises(InvalidLaunchError, match=message) as raised:
        ex.submit(sh("as-user-3", "echo 1", run_as=name))
    assert raised.value.field == "user"


# Reads what it must not, writes what it may: each line says which.
PROBE = """
for what in "$HOME_DIR/admin.token" "$HOME_DIR/danlu.db" "/proc/$PPID/environ"; do
    if cat "$what" >/dev/null 2>&1; then echo "read $what"; else echo "denied $what"; fi
done
if ls "$HOME_DIR" >/dev/null 2>&1; then echo "listed home"; else echo "denied listing"; fi
echo ok > "$DANLU_CHECKPOINT_DIR/step" && echo "wrote checkpoint"
echo "uid $(id -u)"
"""


def test_the_control_plane_runs_each_job_as_its_users_account(
    os_user: str, enterable: Path
) -> None:
    """``danlu server`` with ``DANLU_RUN_AS=user``, as root: a job of the danlu user named
    like the account runs as that account, reaches its checkpoint directory and nothing else
    of the home (the admin token, the database, the supervisor's environment with the job's
    token); a user without an account is refused at submission, naming ``user``."""
    home = enterable / "home"
    env = server_env({"DANLU_RUN_AS": "user"})
    with control_plane(enterable, ["--fake-gpus", "2x80GiB"], env) as admin:
        admin.create_user(os_user)
        admin.create_user("dl-no-account")
        with Client(admin.url, admin.create_token(os_user)) as user:
            job = user.submit(
                {
                    "name": "probe",
                    "command": ["/bin/sh", "-c", PROBE],
                    "env": {"HOME_DIR": str(home)},
                    "resources": {"gpus": 1},
                }
            )
            done = wait_state(user, job["id"], "SUCCEEDED")
            log = user.logs(job["id"])[0].splitlines()
        stranger = Client(admin.url, admin.create_token("dl-no-account"))
        with stranger, pytest.raises(ApiError) as refused:
            stranger.submit({"name": "x", "command": ["/bin/true"]})
        sweep = {
            "name": "s",
            "trial": {"command": ["/bin/true"]},
            "parameters": {"a": {"values": [1, 2]}},
            "metric": {"name": "loss"},
            "method": "grid",
        }
        token = admin.create_token("dl-no-account")
        with Client(admin.url, token) as again, pytest.raises(ApiError) as sweep_refused:
            again.submit_sweep(sweep)  # its trials would run as the missing account
        assert admin.sweeps() == [] and admin.list_jobs(user="dl-no-account") == []
        admin.create_user("mapped", os_user=os_user)  # another name, the same account
        with Client(admin.url, admin.create_token("mapped")) as mapped:
            ids = mapped.submit({"name": "id", "command": ["/bin/sh", "-c", "echo uid $(id -u)"]})
            wait_state(mapped, ids["id"], "SUCCEEDED")
            mapped_log = mapped.logs(ids["id"])[0]
    assert done["restarts"] == 0, log
    assert f"uid {os_account(os_user).uid}" in log
    assert [line for line in log if line.startswith(("read", "listed"))] == []
    assert "wrote checkpoint" in log and "denied listing" in log
    assert (refused.value.status, refused.value.field) == (422, "user")
    assert "no OS account named 'dl-no-account'" in refused.value.message
    assert (sweep_refused.value.status, sweep_refused.value.field) == (422, "trial.user")
    assert f"uid {os_account(os_user).uid}" in mapped_log
    assert stat.S_IMODE(home.stat().st_mode) == 0o711
    assert stat.S_IMODE((home / "admin.token").stat().st_mode) == 0o600
    assert stat.S_IMODE((home / "danlu.db").stat().st_mode) == 0o600


def test_the_supervisor_run_as_root_never_gets_the_jobs_environment(
    ex: LocalExecutor, os_user: str
) -> None:
    """The job's ``env`` (a ``LD_PRELOAD`` among it) and its token reach the job, never the
    supervisor, which runs as root: it reads them from its stdin."""
    script = 'echo "ppid $PPID mark $MARK token $DANLU_TOKEN"; echo ready; exec sleep 60'
    env = {"LD_PRELOAD": "/nonexistent/evil.so", "MARK": "job-env"}
    handle = ex.submit(sh("as-user-4", script, env=env, token="dl_t_secret", run_as=os_user))
    log = wait_text(ex, handle, "ready")
    words = log.split()
    ppid = int(words[words.index("ppid") + 1])
    assert "mark job-env token dl_t_secret" in log
    supervisor_env = Path(f"/proc/{ppid}/environ").read_bytes().split(b"\0")
    assert not [v for v in supervisor_env if v.startswith((b"LD_PRELOAD", b"MARK", b"DANLU"))]
    assert Path(f"/proc/{ppid}/status").read_text().count("Uid:\t0\t") == 1  # root
    ex.cancel(handle)
    assert wait(ex, handle).stop_reason is StopReason.CANCEL


def test_a_job_enters_its_workdir_as_its_account(
    ex: LocalExecutor, os_user: str, enterable: Path
) -> None:
    account = os_account(os_user)
    theirs = enterable / "theirs"
    theirs.mkdir(mode=0o700)
    os.chown(theirs, account.uid, account.gid)
    handle = ex.submit(sh("as-user-4", "echo cwd=$(pwd)", workdir=str(theirs), run_as=os_user))
    status = wait(ex, handle)
    assert status.outcome is Outcome.SUCCEEDED, ex.logs(handle)[0]
    assert f"cwd={theirs}" in ex.logs(handle)[0].decode()
    # a directory only root may enter: the account cannot, though the supervisor (root) could
    closed = enterable / "roots"
    closed.mkdir(mode=0o700)
    handle = ex.submit(sh("as-user-5", "echo entered", workdir=str(closed), run_as=os_user))
    status = wait(ex, handle)
    log = ex.logs(handle)[0].decode()
    assert status.outcome is Outcome.FAILED and "entered" not in log
    assert f"cannot enter the workdir '{closed}': Permission denied" in log
    # one that does not exist, under a directory it cannot reach: told the same as above
    hidden = closed / "missing"
    handle = ex.submit(sh("as-user-6", "echo entered", workdir=str(hidden), run_as=os_user))
    assert wait(ex, handle).outcome is Outcome.FAILED
    assert f"cannot enter the workdir '{hidden}': Permission denied" in ex.logs(handle)[0].decode()
