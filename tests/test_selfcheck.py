"""``gea-graph selfcheck``: the CPU quick run CI makes passes; a failing check gives a non-zero exit and its reason;
the check list is a registry others extend."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gea_graph import selfcheck
from gea_graph.cli import main
from gea_graph.selfcheck import CHECKS, SkipCheck, register_check

REPO = Path(__file__).resolve().parents[1]


def test_cpu_quick_selfcheck_passes(tmp_path):
    # What CI runs: every check on the CPU, DDP with 2 gloo processes; the table and the JSON name them all.
    env = dict(os.environ, PYTHONPATH=str(REPO), OMP_NUM_THREADS="1")
    proc = subprocess.run([sys.executable, "-m", "gea_graph", "selfcheck", "--device", "cpu", "--quick", "--json",
                           str(tmp_path / "selfcheck.json")], cwd=tmp_path, env=env, capture_output=True, text=True,
                          check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    report = json.loads((tmp_path / "selfcheck.json").read_text())
    statuses = {c["name"]: c["status"] for c in report["checks"]}
    assert statuses == dict.fromkeys(CHECKS, "pass"), statuses
    assert {"torch", "torch_geometric", "device"} <= set(report["environment"])
    for name in CHECKS:
        assert f"| {name} | pass |" in proc.stdout
    assert f"{len(CHECKS)} passed, 0 failed, 0 skipped" in proc.stdout
    assert "peak memory (CPU resident)" in proc.stdout



def test_full_ddp_check_passes_with_two_threads(tmp_path):
    # `gea-graph selfcheck` as the README runs it: two epochs, and this process with 2 torch threads. The one-process
    # reference trains with the DDP processes' thread count (with 2 threads it drifted 4e-4 from them by epoch 2).
    env = dict(os.environ, PYTHONPATH=str(REPO), OMP_NUM_THREADS="2")
    proc = subprocess.run([sys.executable, "-m", "gea_graph", "selfcheck", "--device", "cpu", "--only",
                           "DDP: 2 processes = 1 process"], cwd=tmp_path, env=env, capture_output=True, text=True,
                          check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "| DDP: 2 processes = 1 process | pass |" in proc.stdout and "2 epoch(s)" in proc.stdout

def test_a_failing_check_fails_the_run_and_a_skipped_one_does_not(monkeypatch, capsys):
    monkeypatch.setattr(selfcheck, "CHECKS", dict(CHECKS))  # the registry as it was, after the test

    @register_check("always fails")
    def boom(ctx):
        assert 1 + 1 == 3, "arithmetic is broken"

    @register_check("needs hardware")
    def needs(ctx):
        raise SkipCheck("needs 2 GPUs (this machine has 0)")

    assert main(["selfcheck", "--device", "cpu", "--only", "always fails", "--only", "needs hardware"]) == 1
    out = capsys.readouterr().out
    assert "| always fails | FAIL |" in out and "arithmetic is broken" in out
    assert "| needs hardware | skip |" in out and "needs 2 GPUs" in out
    assert "0 passed, 1 failed, 1 skipped" in out
    assert main(["selfcheck", "--device", "cpu", "--only", "needs hardware"]) == 0
    with pytest.raises(ValueError, match="already registered"):
        register_check("needs hardware")(needs)
    assert main(["selfcheck", "--list"]) == 0
    assert "always fails" in capsys.readouterr().out


def test_bad_device_and_unknown_check_are_clear_errors(monkeypatch, capsys):
    monkeypatch.setattr("torch.cuda.is_available", lambda: False)
    assert main(["selfcheck", "--device", "cuda"]) == 2
    assert "argument --device: 'cuda' is not available" in capsys.readouterr().err
    assert main(["selfcheck", "--device", "tpu"]) == 2
    assert "argument --device: 'tpu' is not a device" in capsys.readouterr().err
    assert main(["selfcheck", "--device", "cpu", "--only", "no such check"]) == 2
    assert "argument --only: 'no such check' is not known" in capsys.readouterr().err
