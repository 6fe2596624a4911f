r"""The CPU-countable rows of the performance suite's ``gpu`` group (:mod:`gea_graph.bench.perf.gpu_step`): operators
and host transfers of one training step, ours against PyG's GPS example."""
from __future__ import annotations

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
