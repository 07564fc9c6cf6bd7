"""graphcost audit --scheduler: a local Dask cluster of worker processes gives the local run's rows, byte for byte.

Heavy (starts a cluster; each model pays a Python start-up in its own subprocess on the daemonic Dask
workers): run with ``pytest -m heavy``; needs ``pip install -e .[scale]``.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from test_audit import audit, make_zoo, rows_of

distributed = pytest.importorskip("distributed")

pytestmark = pytest.mark.heavy


def test_dask_local_cluster_rows_equal_the_local_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    zoo = make_zoo(tmp_path)
    local = tmp_path / "local"
    code, _, err = audit(capsys, str(zoo), "--out", str(local), "--jobs", "2")
    assert code == 0, err

    # Default worker config (daemonic workers): each model runs in a `python -m graphcost.audit.worker` child.
    with distributed.LocalCluster(n_workers=3, threads_per_worker=1, processes=True, host="127.0.0.1",
                                  dashboard_address=None) as cluster:
        remote = tmp_path / "dask"
        code, _, err = audit(capsys, str(zoo), "--out", str(remote), "--scheduler", cluster.scheduler_address)
        assert code == 0, err
        with distributed.Client(cluster.scheduler_address) as client:
            assert len(client.scheduler_info()["workers"]) == 3

    assert sorted((remote / "results.jsonl").read_bytes().splitlines()) == \
        sorted((local / "results.jsonl").read_bytes().splitlines())
    assert (remote / "summary.json").read_bytes() == (local / "summary.json").read_bytes()
    assert len(rows_of(remote)) == 9


def test_unreachable_scheduler_is_a_user_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    zoo = tmp_path / "zoo"
    zoo.mkdir()
    (zoo / "a.onnx").write_bytes(b"")
    code, _, err = audit(capsys, str(zoo), "--out", str(tmp_path / "out"), "--scheduler", "tcp://127.0.0.1:9")
    assert code == 2 and "cannot connect" in err
