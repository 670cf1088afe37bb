"""Trace files (``--traces``) saved with a UTF-8 byte-order mark, as spreadsheet programs
write them, load as without one (the mark used to hide the first column: ``missing
column(s) placement``), as workload files do."""

from __future__ import annotations

from pathlib import Path

from danlu.sim.elastic import load_profile

BOM = b"\xef\xbb\xbf"
"""The UTF-8 byte-order mark."""

FILES = {
    "placements.csv": "placement,local_bsz,step_time,sync_time\n"
    "1,32,0.1,0.01\n1,64,0.2,0.01\n11,32,0.15,0.05\n11,64,0.25,0.05\n"
    "2,32,0.12,0.02\n2,64,0.22,0.02\n",
    "scalability.csv": "num_nodes,num_replicas,local_bsz,step_time,sync_time\n"
    "4,8,32,0.3,0.2\n4,8,64,0.4,0.2\n",
    "validation-32.csv": "progress,grad_sqr,grad_var\n100,1,2\n200,0.5,2\n",
    "validation-128.csv": "progress,grad_sqr,grad_var\n110,1,3\n205,0.4,3\n",
}


def _traces(folder: Path, mark: bytes) -> Path:
    app = folder / "tiny"
    app.mkdir(parents=True)
    for name, text in FILES.items():
        (app / name).write_bytes(mark + text.encode())
    return app


def test_trace_files_with_a_byte_order_mark_load_as_without(tmp_path: Path) -> None:
    plain = load_profile(_traces(tmp_path / "plain", b""))
    marked = load_profile(_traces(tmp_path / "marked", BOM))
    assert marked.validated_batch_sizes == plain.validated_batch_sizes == (32, 128)
    assert marked.epoch_boundaries == plain.epoch_boundaries == (100.0, 200.0)
    assert sorted(marked.measured_placements) == sorted(plain.measured_placements)
    assert marked.step_time((1, 1), 48) == plain.step_time((1, 1), 48)
    assert marked.step_time((2, 2, 2, 2), 32) == plain.step_time((2, 2, 2, 2), 32)
