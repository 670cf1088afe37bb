"""Checkpoints on an S3-compatible object store: a local moto server, through fsspec/s3fs."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("s3fs")
moto_server = pytest.importorskip("moto.server")

from danlu.train.checkpoint import CheckpointManager  # noqa: E402
from danlu.train.state import capture_state, restore_state  # noqa: E402


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def s3() -> Iterator[dict]:
    port = _free_port()
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    opts = {
        "key": "testing",
        "secret": "testing",
        "endpoint_url": f"http://127.0.0.1:{port}",
        "client_kwargs": {"region_name": "us-east-1"},
        "use_listings_cache": False,
    }
    import boto3

    boto3.client(
        "s3",
        endpoint_url=opts["endpoint_url"],
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
        region_name="us-east-1",
    ).create_bucket(Bucket="ckpt-bucket")
    try:
        yield opts
    finally:
        server.stop()


def test_s3_save_load_fallback_and_retention(s3: dict) -> None:
    torch.manual_seed(0)
    model = torch.nn.Linear(16, 16)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    url = "s3://ckpt-bucket/run-1"
    mgr = CheckpointManager(
        url,
        keep_last=2,
        best_metric="loss",
        incremental=True,
        full_every=2,
        async_save=True,
        storage_options=s3,
    )
    assert mgr.load_latest() is None
    saved = {}
    for step in range(1, 6):
        model(torch.randn(2, 16)).sum().backward()
        opt.step()
        saved[step] = capture_state(model, opt, step=step)
        mgr.save(step, saved[step], {"loss": float(step)})
    mgr.close()

    fresh = CheckpointManager(url, storage_options=s3)
    infos = fresh.list_checkpoints()
    # last 2 (steps 4, 5) + best by min loss (step 1) + the full base of step 4 (step 3)
    assert [i.step for i in infos] == [1, 3, 4, 5]
    assert [i.kind for i in infos] == ["full", "full", "incremental", "full"]
    step, state = fresh.load_latest()  # type: ignore[misc]
    assert step == 5
    m2 = torch.nn.Linear(16, 16)
    restore_state(state, m2)
    assert torch.equal(m2.weight, model.weight) and torch.equal(m2.bias, model.bias)

    # A power cut on the object store: the newest object set lacks its manifest.
    fresh.storage.fs.rm(fresh.storage.join(infos[-1].name, "MANIFEST.json"))
    step, state = CheckpointManager(url, storage_options=s3).load_latest()  # type: ignore[misc]
    assert step == 4
    assert torch.equal(state["model"]["weight"], saved[4]["model"]["weight"])
