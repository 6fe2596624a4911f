"""The captured-step check of ``gea-graph selfcheck --device cuda``, run compiled (aot_eager) on CPU."""
import torch

from gea_graph.train.capture import replay_gap


def test_compiled_fixed_size_step_replays_eager_to_1e_5():
    gap, graphs = replay_gap(torch.device("cpu"))
    assert graphs == 1  # one shape: one graph, replayed for every batch
    assert gap <= 1e-5
