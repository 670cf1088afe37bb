"""``danlu up`` (a local control plane, prints the URL and the admin token) and ``danlu server``
(the same for production: the token stays in ``{home}/admin.token``)."""

from __future__ import annotations

import contextlib
import json
import logging
from pathlib import Path
from typing import Annotated, Any

import typer

from danlu.cli.interrupt import INTERRUPTED
from danlu.cli.options import error_line, fail, float_option, path_of, refuse_empty
from danlu.core.errors import ConfigError, DanluError
from danlu.core.values import plain_number_text

HomeOpt = Annotated[
    Path | None,
    typer.Option(
        "--home",
        help="state directory (default: DANLU_HOME or ~/.danlu)",
        parser=path_of(
            "--home", "give the state directory, or leave --home out for DANLU_HOME or ~/.danlu"
        ),
    ),
]


def parse_port(text: str) -> int:
    """``--port``'s text as a number, written in ASCII digits (a sign or spaces around it
    as before: the server refuses a port out of 0..65535, naming ``--port``); anything
    else is an error line and exit 2. ``int`` (click's) also read ``8_470`` as 8470, and
    other scripts' digits."""
    try:
        if not plain_number_text(text):
            raise ValueError(text)
        return int(text)
    except ValueError:
        raise fail(
            ConfigError(
                f"--port: {text!r} is not a port; write it in plain digits, 0..65535, e.g. "
                "--port 8470 (0: any free port)"
            )
        ) from None


PortOpt = Annotated[
    int | None,
    typer.Option(
        "--port",
        help=(
            "HTTP port (default 8470; 0: any free one, the home's port before where it is "
            "free, which its running jobs report to)"
        ),
        parser=parse_port,
    ),
]
FakeOpt = Annotated[
    str | None,
    typer.Option("--fake-gpus", help="fake GPU inventory instead of NVML, e.g. 4x80GiB"),
]
PolicyOpt = Annotated[
    str | None, typer.Option("--policy", help="scheduling policy (default: priority)")
]
PolicyOptionOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--policy-option",
        help="policy option KEY=VALUE, repeatable; replaces DANLU_POLICY_OPTIONS when given",
    ),
]
HostOpt = Annotated[str, typer.Option("--host", help="address to listen on")]
ExecutorOpt = Annotated[
    str | None,
    typer.Option("--executor", help="where jobs run: local (this host, the default), slurm or ray"),
]
RayAddressOpt = Annotated[
    str | None,
    typer.Option("--ray-address", help="the Ray cluster to join (--executor ray; default: auto)"),
]
PartitionOpt = Annotated[
    str | None,
    typer.Option(
        "--slurm-partition",
        help="the Slurm partition danlu schedules (--executor slurm; default: Slurm's default)",
    ),
]
IntervalOpt = Annotated[
    float | None,
    float_option("--interval", help="seconds between reconcile passes (default 2)", example="2"),
]
TakeOverOpt = Annotated[
    bool,
    typer.Option(
        "--take-over-lost-home",
        help=(
            "once, when the home that launched the database's running jobs is lost for good "
            "(its host died): take the database over, its running jobs resuming here from "
            "their last checkpoints"
        ),
    ),
]
DbOpt = Annotated[
    str | None, typer.Option("--database-url", help="SQLAlchemy URL (default: SQLite in home)")
]


FLAGS = {
    "home": "--home",
    "port": "--port",
    "fake_gpus": "--fake-gpus",
    "policy": "--policy",
    "policy_options": "--policy-option",
    "interval": "--interval",
    "database_url": "--database-url",
    "executor": "--executor",
    "slurm_partition": "--slurm-partition",
    "ray_address": "--ray-address",
}
"""The flag of each setting ``danlu up`` and ``danlu server`` take: a bad value given there
is reported by its flag (and variable), not by the ``DANLU_*`` variable alone."""

EMPTY_FIXES = {
    "fake_gpus": "give an inventory such as 4x80GiB, or leave --fake-gpus out for the real GPUs",
    "policy": "give a policy such as priority, or leave --policy out for the default",
    "host": "give an address to listen on: 127.0.0.1 (the default), or 0.0.0.0 for every one",
    "database_url": "give a SQLAlchemy URL, or leave --database-url out for SQLite in the home",
    "executor": "give local, slurm or ray, or leave --executor out for the default",
    "slurm_partition": "give a partition, or leave --slurm-partition out for Slurm's default",
    "ray_address": "give the Ray cluster's address, or leave --ray-address out for auto",
}
"""What to give instead of an empty value of each text flag of ``danlu up`` and ``danlu
server``, which refuse one: it was read as not given, so ``--executor "$EXECUTOR"`` with the
variable unset ran the jobs on this host and ``--fake-gpus "$GPUS"`` took the real GPUs,
without a word, and ``--host ""`` listened on every interface (``bind`` reads ``""`` so).
``--home ""``, the current directory, is refused by its parser
(:func:`~danlu.cli.options.path_of`)."""


def _settings(**given: Any) -> Any:
    from danlu.config import load_settings

    return load_settings(flags=FLAGS, **{k: v for k, v in given.items() if v is not None})


QUIET_LOGGERS = ("alembic", "httpx", "httpcore")
"""Libraries whose INFO lines the control plane's log leaves out: Alembic's per-revision
lines, and httpx's line per request, which is a webhook delivery's URL with its
``user:password@`` in clear (the API shows it as ``user:***@``) and noise besides (one line a
post, a retry each); their warnings stay. danlu logs a failed delivery itself."""


def configure_logging() -> None:
    """The control plane's log: INFO and up with time and logger name, but
    :data:`QUIET_LOGGERS` at WARNING."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    for name in QUIET_LOGGERS:
        logging.getLogger(name).setLevel(logging.WARNING)


def _start(
    *,
    show_token: bool,
    home: Path | None,
    port: int | None,
    fake_gpus: str | None,
    policy: str | None,
    policy_option: list[str] | None,
    host: str,
    interval: float | None,
    database_url: str | None,
    executor: str | None = None,
    slurm_partition: str | None = None,
    ray_address: str | None = None,
    take_over_lost_home: bool = False,
) -> None:
    from danlu.config import parse_option_pairs
    from danlu.core.fake_gpus import parse_fake_gpus
    from danlu.server.main import Prepared, prepare, run
    from danlu.server.plane_lease import InUseByAnotherPlane

    configure_logging()
    try:
        given = {
            "fake_gpus": fake_gpus,
            "policy": policy,
            "host": host,
            "database_url": database_url,
            "executor": executor,
            "slurm_partition": slurm_partition,
            "ray_address": ray_address,
        }
        for key, fix in EMPTY_FIXES.items():
            refuse_empty(f"--{key.replace('_', '-')}", given[key], fix)
        if fake_gpus:  # its grammar's error names the flag: the settings' named it twice
            parse_fake_gpus(fake_gpus)
        options = parse_option_pairs(policy_option, "--policy-option") if policy_option else None
        settings = _settings(
            home=home,
            port=port,  # its range checked here, before the home is made
            fake_gpus=fake_gpus,
            policy=policy,
            policy_options=json.dumps(options) if options is not None else None,
            interval=interval,
            database_url=database_url,
            executor=executor,
            slurm_partition=slurm_partition,
            ray_address=ray_address,
        )
        prepared = prepare(
            settings,
            host=host,
            port=port,
            fake_gpus=fake_gpus,
            take_over_lost_home=take_over_lost_home,
        )
    except InUseByAnotherPlane as exc:  # its own status: systemd must not start it again
        error_line(exc)
        raise typer.Exit(code=exc.exit_code) from None
    except (DanluError, OSError) as exc:
        raise fail(exc) from None

    def ready(p: Prepared) -> None:
        print(
            f"danlu is up: {p.url}  (home {p.settings.home}, policy {p.settings.policy}"
            + (f" {json.dumps(p.settings.policy_knobs)}" if p.settings.policy_knobs else "")
            + ")",
            flush=True,
        )
        if show_token:
            print(f"admin token: {p.admin_token}", flush=True)
        else:
            print(f"admin token in {p.settings.admin_token_path}", flush=True)
        print(f"dashboard: {p.url}/dashboard/", flush=True)
        print("press Ctrl-C to stop", flush=True)

    try:
        run(prepared, ready)
    except KeyboardInterrupt:  # uvicorn stopped, then raised the Ctrl-C again
        command = "up" if show_token else "server"
        stopped(f"danlu {command} --home {prepared.settings.home}")
        raise typer.Exit(code=INTERRUPTED) from None


def stopped(again: str) -> None:
    """Say, on stdout after the start-up's lines, that the control plane stopped (Ctrl-C)
    and what became of the jobs: it stops none (docs/deploy.md, "Restarts lose nothing"),
    and ``again`` (the command that starts it on this home) adopts those still running.
    Said nothing before, which read as if the jobs had stopped with it."""
    with contextlib.suppress(OSError):  # stdout gone with the terminal: nobody to tell
        print(
            f"danlu stopped; its running jobs keep running, and the next {again} adopts them",
            flush=True,
        )


def up(
    home: HomeOpt = None,
    port: PortOpt = None,
    fake_gpus: FakeOpt = None,
    policy: PolicyOpt = None,
    policy_option: PolicyOptionOpt = None,
    host: HostOpt = "127.0.0.1",
    interval: IntervalOpt = None,
    database_url: DbOpt = None,
    executor: ExecutorOpt = None,
    slurm_partition: PartitionOpt = None,
    ray_address: RayAddressOpt = None,
    take_over_lost_home: TakeOverOpt = False,
) -> None:
    """Start a local control plane (server + local executor, SQLite in --home; or jobs run
    by Slurm or Ray with --executor slurm|ray); prints the URL and the admin token, then
    serves until Ctrl-C."""
    _start(
        show_token=True,
        home=home,
        port=port,
        fake_gpus=fake_gpus,
        policy=policy,
        policy_option=policy_option,
        host=host,
        interval=interval,
        database_url=database_url,
        executor=executor,
        slurm_partition=slurm_partition,
        ray_address=ray_address,
        take_over_lost_home=take_over_lost_home,
    )


def server(
    home: HomeOpt = None,
    port: PortOpt = None,
    fake_gpus: FakeOpt = None,
    policy: PolicyOpt = None,
    policy_option: PolicyOptionOpt = None,
    host: HostOpt = "127.0.0.1",
    interval: IntervalOpt = None,
    database_url: DbOpt = None,
    executor: ExecutorOpt = None,
    slurm_partition: PartitionOpt = None,
    ray_address: RayAddressOpt = None,
    take_over_lost_home: TakeOverOpt = False,
) -> None:
    """Run the control plane (production): like `up` but the admin token is not printed."""
    _start(
        show_token=False,
        home=home,
        port=port,
        fake_gpus=fake_gpus,
        policy=policy,
        policy_option=policy_option,
        host=host,
        interval=interval,
        database_url=database_url,
        executor=executor,
        slurm_partition=slurm_partition,
        ray_address=ray_address,
        take_over_lost_home=take_over_lost_home,
    )


def register(app: typer.Typer) -> None:
    """Add ``danlu up`` and ``danlu server`` to ``app``."""
    app.command("up")(up)
    app.command("server")(server)
