"""The admin tables and lines (``danlu whoami``, ``user ls``, ``project ls``, ``usage``) and
every command's ``error:`` line show the server's text as text: Rich markup kept as it is,
and control characters (an escape sequence, a line break) written as escapes, never acted
on by the terminal nor splitting a table's row. Against a stub of the API that answers
names stored before the API refused control characters."""

from __future__ import annotations

from typing import Any

import pytest
from cli_fake_api import invoke, jobs_app, no_raw_control, serve_replies

from danlu.cli import main as main_cli

NAME = "ev\x1b[2Jil\nrow[/x]"
SHOWN = "ev\\x1b[2Jil\\nrow[/x]"


PROJECT = {"name": NAME, "priority": 0, "quota_gpus": None, "quota_gpu_memory": None}
REPLIES: dict[str, Any] = {
    "/users/me": {"name": NAME, "role": f"admin{NAME}"},
    "/users": [{"name": NAME, "role": NAME, "os_user": NAME, "quota_gpus": None}],
    "/projects": [PROJECT | {"share": 1.0, "members": [NAME]}],
    "/usage": [
        {"project": NAME, "user": NAME, "gpu_hours": 1.0, "gpu_memory_gib_hours": 2.0, "jobs": 1}
    ],
}


@pytest.mark.parametrize(
    "args", [["whoami"], ["user", "ls"], ["project", "ls"], ["usage"]], ids=str
)
def test_server_text_in_admin_output_is_escaped(
    monkeypatch: pytest.MonkeyPatch, args: list[str]
) -> None:
    serve_replies(monkeypatch, REPLIES)
    code, out, err = invoke(main_cli.app, *args)
    assert code == 0, err
    assert SHOWN in out  # on one line: the name's line break did not split its row
    no_raw_control(out)


def test_an_error_message_from_the_server_is_escaped(monkeypatch: pytest.MonkeyPatch) -> None:
    serve_replies(monkeypatch, {}, missing=NAME)  # a 404, its message the NAME
    code, _, err = invoke(jobs_app(), "show", "abc")
    assert code == 2
    assert f"error: {SHOWN} /jobs/abc" in err
    no_raw_control(err)
