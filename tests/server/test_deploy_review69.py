"""Deploying the control plane: the default SQLite database is ``<home>/danlu.db``
whatever characters the home's path holds (a ``?`` or ``%2F`` took it outside the home); a
SQLite database whose directory cannot be made is an error naming the setting and the fix
(was a bare OS error after four warnings); and a setting of one executor given to another
(``--ray-address`` without ``--executor ray``) is refused before anything starts, instead of
being ignored while jobs run on the host."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import typer
from sqlalchemy.engine import make_url
from typer.testing import CliRunner

from danlu.cli import server
from danlu.config import load_settings
from danlu.core.errors import ConfigError
from danlu.server import main
from danlu.server.db import Database, make_engine
from danlu.server.main import Prepared, prepare

ODD_NAMES = [
    pytest.param("team?a", id="question-mark"),
    pytest.param("x%2Fy", id="percent-2F"),
    pytest.param("odd%41b", id="percent-41"),
    pytest.param("odd#frag", id="hash"),
    pytest.param("sp ace", id="space"),
    pytest.param("a+b", id="plus"),
    pytest.param("odd@host:pw", id="at-colon"),
    pytest.param("équipe-数据", id="non-ascii"),
    pytest.param("semi;colon&amp=1", id="semicolon-ampersand"),
]


def _cli() -> typer.Typer:
    app = typer.Typer()
    server.register(app)
    return app


@pytest.fixture(autouse=True)
def _no_serving(monkeypatch: pytest.MonkeyPatch) -> None:
    """A ``danlu server`` these tests start is closed instead of served: one that should
    have been refused fails its test (exit 0) instead of serving for ever."""

    def close(prepared: Prepared, *_args: object, **_kwargs: object) -> None:
        prepared.close()

    monkeypatch.setattr(main, "run", close)


@pytest.mark.parametrize("name", ODD_NAMES)
def test_the_default_database_url_names_the_file_in_the_home(tmp_path: Path, name: str) -> None:
    """``sqlite:///{home}/danlu.db`` unescaped: SQLAlchemy read ``?a`` as a query and
    decoded ``%2F`` into a directory."""
    settings = load_settings(home=tmp_path / name)
    assert make_url(settings.db_url).database == str(tmp_path / name / "danlu.db")


@pytest.mark.parametrize("name", ODD_NAMES)
def test_the_engine_opens_the_file_in_the_home(tmp_path: Path, name: str) -> None:
    home = tmp_path / name
    home.mkdir()
    db = Database(load_settings(home=home).db_url)
    try:
        with db.engine.connect() as conn:
            conn.exec_driver_sql("CREATE TABLE t (x INTEGER)")
    finally:
        db.dispose()
    assert (home / "danlu.db").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == [name]


def test_two_homes_told_apart_by_a_query_keep_two_databases(tmp_path: Path) -> None:
    """Homes ``team?a`` and ``team?b`` both used the file ``team`` beside them: the second's
    start revoked the first's admin token."""
    work = tmp_path / "w"
    work.mkdir()
    for name in ("team?a", "team?b"):
        settings = load_settings(home=work / name, fake_gpus="1x80GiB")
        prepared = prepare(settings, port=0, start_loops=False, announce=lambda _t: None)
        prepared.close()
    assert (work / "team?a" / "danlu.db").is_file()
    assert (work / "team?b" / "danlu.db").is_file()
    assert sorted(p.name for p in work.iterdir()) == ["team?a", "team?b"]


def test_a_home_a_url_cannot_name_is_a_config_error(tmp_path: Path) -> None:
    """A name that is no UTF-8 (a surrogate escape of a byte) cannot go into a URL: an
    error naming --home and the fix, not a UnicodeEncodeError from deep in SQLAlchemy."""
    settings = load_settings(home=tmp_path / "bad\udcff")
    with pytest.raises(ConfigError) as err:
        _ = settings.db_url
    assert "--home" in str(err.value) and "--database-url" in str(err.value)


def _server_with_database(home: Path, url: str) -> list[str]:
    """``danlu server``'s arguments for a plane of ``home`` on the database ``url``."""
    return [
        "server",
        "--home",
        str(home),
        "--port",
        "0",
        "--fake-gpus",
        "1x80GiB",
        "--database-url",
        url,
    ]


def _file_in_the_way(tmp_path: Path) -> Path:
    blocker = tmp_path / "afile"
    blocker.write_text("not a directory")
    return blocker


@pytest.mark.parametrize(
    "under",
    [
        pytest.param("danlu.db", id="file-is-the-directory"),
        pytest.param("sub/danlu.db", id="deeper"),
    ],
)
def test_a_database_directory_that_cannot_be_made_names_the_setting(
    tmp_path: Path, under: str, caplog: pytest.LogCaptureFixture
) -> None:
    """``[Errno 17] File exists`` after four "cannot make database file ... private"
    warnings, naming neither the setting nor a fix."""
    path = _file_in_the_way(tmp_path) / under
    url = f"sqlite:///{path}"
    with caplog.at_level(logging.WARNING, logger="danlu"):
        result = CliRunner().invoke(_cli(), _server_with_database(tmp_path / "h", url))
    assert result.exit_code == 2, result.output
    out = " ".join(result.output.split())
    assert "--database-url" in out and "DANLU_DATABASE_URL" in out, out
    assert str(path.parent) in out and "Traceback" not in out, out
    assert "Errno" not in out, out
    assert not [r for r in caplog.records if "private" in r.getMessage()], caplog.text


def test_make_engine_names_the_setting_when_the_directory_cannot_be_made(
    tmp_path: Path,
) -> None:
    path = _file_in_the_way(tmp_path) / "danlu.db"
    with pytest.raises(ConfigError) as err:
        make_engine(f"sqlite:///{path}")
    assert "DANLU_DATABASE_URL" in str(err.value) and "not a directory" in str(err.value)


def test_a_sqlite_database_is_shown_by_its_path(tmp_path: Path) -> None:
    """A database that cannot be opened is named by the file SQLite tried, not by a URL
    with the path's characters percent-encoded."""
    path = tmp_path / "odd?dir" / "danlu.db"
    path.mkdir(parents=True)  # a directory where the file should be: SQLite cannot open it
    url = "sqlite:///" + str(path).replace("?", "%3F")
    result = CliRunner().invoke(_cli(), _server_with_database(tmp_path / "h", url))
    assert result.exit_code == 2, result.output
    out = " ".join(result.output.split())
    assert f"cannot open the database {path} " in out, out
    assert "DANLU_DATABASE_URL" in out, out


FOREIGN = [
    pytest.param(["--slurm-partition", "gpu"], {}, "--executor slurm", id="flag-partition"),
    pytest.param(["--ray-address", "10.0.0.1:6379"], {}, "--executor ray", id="flag-ray"),
    pytest.param([], {"DANLU_SLURM_PARTITION": "gpu"}, "--executor slurm", id="env-partition"),
    pytest.param([], {"DANLU_RAY_ADDRESS": "10.0.0.1:6379"}, "--executor ray", id="env-ray"),
    pytest.param(
        [], {"DANLU_SLURM_SBATCH_OPTIONS": "--account=ml"}, "--executor slurm", id="env-sbatch"
    ),
    pytest.param([], {"DANLU_SLURM_PENDING_LIMIT": "600"}, "--executor slurm", id="env-pending"),
    pytest.param([], {"DANLU_SLURM_GPU_TYPE": "H100"}, "--executor slurm", id="env-gpu-type"),
    pytest.param(
        ["--executor", "slurm", "--ray-address", "10.0.0.1:6379"],
        {},
        "--executor ray",
        id="ray-address-with-slurm",
    ),
    pytest.param(
        ["--executor", "ray", "--slurm-partition", "gpu"],
        {},
        "--executor slurm",
        id="partition-with-ray",
    ),
]


@pytest.mark.parametrize("command", ["server", "up"])
@pytest.mark.parametrize(("flags", "env", "fix"), FOREIGN)
def test_a_setting_of_another_executor_is_refused(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    command: str,
    flags: list[str],
    env: dict[str, str],
    fix: str,
) -> None:
    """``--slurm-partition`` or ``--ray-address`` without its executor was ignored: the
    server started on a fake GPU of its host and ran the jobs there."""
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    home = tmp_path / "h"
    result = CliRunner().invoke(_cli(), [command, "--home", str(home), "--port", "0", *flags])
    assert result.exit_code == 2, result.output
    out = " ".join(result.output.split())
    assert fix in out and "Traceback" not in out, out
    shown = flags[-2] if flags else next(iter(env))
    assert shown in out, out
    for name in env:
        assert name in out, out
    assert not (home / "danlu.db").exists(), "refused after the store was made"


def test_an_empty_variable_of_another_executor_is_unset(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An empty ``DANLU_*`` is unset (config.py), so it is no setting of another executor."""
    for name in ("DANLU_RAY_ADDRESS", "DANLU_SLURM_PARTITION", "DANLU_SLURM_PENDING_LIMIT"):
        monkeypatch.setenv(name, "")
    settings = load_settings(home=tmp_path, fake_gpus="1x80GiB")
    prepare(settings, port=0, start_loops=False, announce=lambda _t: None).close()
