"""An OS account in the root group or a group whose members can make themselves root
(docker, disk, ...) is refused as a job's account: ``os_account`` refused only
uid 0, so a job run as such an account (DANLU_RUN_AS=user) could take the host's root."""

from __future__ import annotations

import os
import secrets
import subprocess
from collections.abc import Iterator

import pytest

from danlu.executors import InvalidLaunchError
from danlu.executors.accounts import os_account

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="making OS accounts needs root")


@pytest.fixture
def account() -> Iterator[str]:
    """The name of a fresh OS account, removed after the test (made by the test)."""
    name = f"dl{secrets.token_hex(4)}"
    yield name
    subprocess.run(["userdel", name], check=False, capture_output=True)
    subprocess.run(["groupdel", name], check=False, capture_output=True)


def _useradd(name: str, *options: str) -> None:
    subprocess.run(
        ["useradd", "--no-create-home", "--shell", "/usr/sbin/nologin", *options, name],
        check=True,
        capture_output=True,
    )


@pytest.mark.parametrize(
    ("options", "group"),
    [(("-g", "0"), "root (gid 0)"), (("-G", "root"), "root (gid 0)"), (("-G", "disk"), "disk")],
)
def test_an_account_of_a_root_equivalent_group_is_refused(
    account: str, options: tuple[str, ...], group: str
) -> None:
    _useradd(account, *options)
    with pytest.raises(InvalidLaunchError, match="make themselves root") as caught:
        os_account(account)
    assert caught.value.field == "user"
    assert group in caught.value.message and f"gpasswd -d {account}" in caught.value.message


def test_a_plain_account_is_still_an_account(account: str) -> None:
    _useradd(account)
    got = os_account(account)
    assert got.name == account and 0 not in got.groups and got.uid != 0
