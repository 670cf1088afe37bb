"""danlu.train reads a ``file:`` URL checkpoint directory as the spec's checks and the
control plane do (:mod:`danlu.core.file_url`): its path percent-decoded
(``file:///tmp/my%20runs`` was written to a folder literally named ``my%20runs``),
``file:/path`` the path (it was ``./file:/path``), and a URL naming no directory of this
machine a ConfigError naming the setting (``file://ckpt/run1``, the host ``ckpt``, was
written to ``./ckpt/run1``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from train_helpers import mse_loss, tiny_model, tiny_regression

import danlu.train as dt
from danlu.core.errors import ConfigError
from danlu.train.checkpoint import CheckpointManager
from danlu.train.checkpoint.storage import local_directory, open_storage


def _train(environ: dict[str, str], checkpoint_dir: str | None = None, steps: int = 2) -> None:
    model = tiny_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = tiny_regression(8).tensors
    with dt.init(
        model,
        opt,
        global_batch_size=8,
        checkpoint_dir=checkpoint_dir,
        checkpoint_every_steps=2,
        environ=environ,
    ) as ctx:
        while ctx.step_num < steps:
            ctx.step((x, y), mse_loss)


@pytest.mark.parametrize(
    "url",
    ["file://{tmp}/my%20runs", "FILE://localhost{tmp}/my%20runs", "file:{tmp}/my%20runs"],
)
def test_the_job_writes_to_the_decoded_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, url: str
) -> None:
    (tmp_path / "cwd").mkdir()
    monkeypatch.chdir(tmp_path / "cwd")
    _train({"DANLU_CHECKPOINT_DIR": url.format(tmp=tmp_path)})
    directory = tmp_path / "my runs"
    assert [p.name for p in directory.glob("ckpt-000000000002-*")] != []
    records = [json.loads(line) for line in (directory / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records if "loss" in r] == [1, 2]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cwd", "my runs"]
    assert list((tmp_path / "cwd").iterdir()) == []


def test_a_literal_percent_is_written_as_25(tmp_path: Path) -> None:
    mgr = CheckpointManager(f"file://{tmp_path}/100%25")
    mgr.save(3, {"w": torch.ones(2)})
    assert len(list((tmp_path / "100%").glob("ckpt-000000000003-*/MANIFEST.json"))) == 1
    assert CheckpointManager(str(tmp_path / "100%")).load_latest()[0] == 3  # type: ignore[index]


def test_a_plain_path_is_never_decoded(tmp_path: Path) -> None:
    storage = open_storage(str(tmp_path / "my%20runs"))
    assert storage.root == str(tmp_path / "my%20runs")
    assert (tmp_path / "my%20runs").is_dir()


@pytest.mark.parametrize(
    ("url", "said"),
    [
        ("file://ckpt/run1", "names the host 'ckpt'"),
        ("file://~/ckpt", "names the host '~'"),
        ("file://server{tmp}/ckpt", "names the host 'server'"),
        ("file:ckpt", "relative path 'ckpt'"),
        ("file://{tmp}/a%00b", "NUL"),
        ("file://{tmp}/a%ffb", "no UTF-8"),
    ],
)
def test_a_url_naming_no_directory_here_is_a_config_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, url: str, said: str
) -> None:
    monkeypatch.chdir(tmp_path)
    given = url.format(tmp=tmp_path)
    with pytest.raises(ConfigError) as caught:
        _train({"DANLU_CHECKPOINT_DIR": given})
    message = str(caught.value)
    assert said in message and "DANLU_CHECKPOINT_DIR" in message
    with pytest.raises(ConfigError, match=said):
        local_directory(given)
    assert list(tmp_path.iterdir()) == []  # nothing written anywhere
