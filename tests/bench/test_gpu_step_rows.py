r"""The CPU-countable rows of the performance suite's ``gpu`` group (:mod:`gea_graph.bench.perf.gpu_step`): operators
and host transfers of one training step, ours against PyG's GPS example."""
from __future__ import annotations

import pytest
import torch

from gea_graph.bench.perf import gpu_step
from gea_graph.bench.perf.core import Settings


def test_step_rows_count_the_eager_step_and_the_captured_steps_host_contact():
    rows = {row.name: row for row in gpu_step.step_rows(Settings.make(quick=True, device=torch.device("cpu")))}
    ops = rows["training step operators [geaet-zinc, batch 32]"]
    syncs = rows["host syncs per training step [geaet-zinc, batch 32]"]

    # both sides counted, the ratio theirs, and the fixed-size step's own count in the note
    assert ops.ours > 500 and ops.reference > 500 and ops.ratio == ops.ours / ops.reference
    captured = int(ops.note.rsplit(": ", 1)[1])
    assert captured > ops.ours  # the padded step's masked batch norms cost operators the eager step does not launch
    # the captured step makes no host contact; PyG's example step makes some (AdamW's step counters on the host)
    assert syncs.ours == 0 and syncs.met
    assert syncs.reference > 0


_FAKE_RUN = """
import os, sys
recipe, epochs, seed, out = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
if seed == 1:
    print("noise", flush=True)
    sys.exit("torch.OutOfMemoryError: CUDA out of memory")
os.makedirs(out)
with open(os.path.join(out, "metrics.csv"), "w") as f:
    f.write("epoch,train_loss,val,test,lr,time\\n" + "".join(f"{e},1,1,1,0.1,{2.5 - e}\\n" for e in range(epochs)))
"""


def test_side_by_side_runs_give_their_epoch_times_or_say_why_one_ended(monkeypatch):
    # the CUDA rows' runs (Peptides-func epoch, paper schedule) as processes side by side, faked on CPU
    monkeypatch.setattr(gpu_step, "_EPOCH_SCRIPT", _FAKE_RUN)
    assert gpu_step._epoch_times("geaet-zinc", 2, [0, 2]) == [[2.5, 1.5], [2.5, 1.5]]
    with pytest.raises(RuntimeError, match="geaet-zinc seed 1 ended with exit code 1: torch.OutOfMemoryError: CUDA"):
        gpu_step._epoch_times("geaet-zinc", 2, [0, 1])


def test_cuda_rows_are_skipped_rows_elsewhere():
    rows = list(gpu_step.cuda_rows(Settings.make(quick=True, device=torch.device("cpu"))))
    assert [r.name for r in rows] == ["training throughput [ZINC GEAET recipe vs PyG GPS example]",
                                      "Peptides-func epoch [gcn-geanet-peptides-func]",
                                      "paper schedule [geaet-zinc, 4 seeds]"]
    assert all(r.ours is None and "CUDA only" in r.note for r in rows)
