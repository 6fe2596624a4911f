"""PCQM-Contact ranking metrics (GEAET Table 9): raw (LRGB) and filtered (Tönshoff et al. 2023) MRR and Hits@k on a
hand-computed example."""
import pytest
import torch
from torch_geometric.data import Batch, Data

from gea_graph.train.metrics import LinkRanking, LinkTargets, link_scores, loss_fn, metric_values


def two_graphs() -> tuple[torch.Tensor, Batch]:
    """Graph A (nodes 0-3), positives (0, 1) and (0, 2), negative (1, 3); node 0 scores [5, 3, 4, 1] against
    nodes 0..3. Graph B (nodes 0-2), positive (0, 2); node 0 scores [1, 0, 2]."""
    a = Data(num_nodes=4, edge_index=torch.empty(2, 0, dtype=torch.long),
             edge_label_index=torch.tensor([[0, 0, 1], [1, 2, 3]]), edge_label=torch.tensor([1, 1, 0]))
    b = Data(num_nodes=3, edge_index=torch.empty(2, 0, dtype=torch.long),
             edge_label_index=torch.tensor([[0], [2]]), edge_label=torch.tensor([1]))
    emb = torch.tensor([[1.0, 2.0], [3.0, 0.0], [0.0, 2.0], [1.0, 0.0],  # A: e0.e = 5, 3, 4, 1
                        [1.0, 0.0], [0.0, 1.0], [2.0, 0.0]])  # B: f0.f = 1, 0, 2
    return emb, Batch.from_data_list([a, b])


def test_link_scores_and_targets():
    emb, batch = two_graphs()
    scores, targets = link_scores(emb, batch)
    inf = float("-inf")
    assert torch.equal(scores, torch.tensor([[5.0, 3.0, 4.0, 1.0], [5.0, 3.0, 4.0, 1.0], [1.0, 0.0, 2.0, inf]]))
    assert targets.index.tolist() == [1, 2, 2] and targets.graph.tolist() == [0, 0, 1]
    # the true partners of each pair's source: node 0 of A has 1 and 2, node 0 of B has 2
    assert targets.positives.tolist() == [[False, True, True, False]] * 2 + [[False, False, True, False]]


def test_raw_and_filtered_values_by_hand():
    emb, batch = two_graphs()
    metric = LinkRanking()
    metric.update(*link_scores(emb, batch))
    values = metric.compute()
    # A: pair (0,1) raw rank 3 (nodes 0 and 2 score >= 3), filtered 2 (node 2 is a true partner: removed);
    #    pair (0,2) raw rank 2, filtered 2.  B: pair (0,2) rank 1.  Pairs are averaged per graph, then graphs.
    expected = {"mrr": ((1 / 3 + 1 / 2) / 2 + 1) / 2, "hits@1": 0.5, "hits@3": 1.0, "hits@10": 1.0,
                "mrr_filtered": (1 / 2 + 1) / 2, "hits@1_filtered": 0.5, "hits@3_filtered": 1.0,
                "hits@10_filtered": 1.0}
    assert set(values) == set(expected)
    for key, value in expected.items():
        assert float(values[key]) == pytest.approx(value), key
    # graph averaging differs from the plain mean over the three pairs (0.611)
    assert float(values["mrr"]) == pytest.approx(17 / 24)


def test_accumulates_over_batches_and_ties_count_against():
    emb, batch = two_graphs()
    scores, targets = link_scores(emb, batch)
    metric = LinkRanking()
    metric.update(scores[:2], LinkTargets(targets.index[:2], targets.positives[:2], targets.graph[:2]))
    metric.update(scores[2:], LinkTargets(targets.index[2:], targets.positives[2:], targets.graph[2:]))
    assert float(metric.compute()["mrr"]) == pytest.approx(17 / 24)
    tie = torch.tensor([[2.0, 2.0, 0.0]])
    raw, filtered = LinkRanking.ranks(tie, LinkTargets(torch.tensor([1]), torch.tensor([[False, True, False]]),
                                                       torch.tensor([0])))
    assert raw.tolist() == [2] and filtered.tolist() == [2]


def test_rank_loss_and_headline_value():
    emb, batch = two_graphs()
    emb.requires_grad_(True)
    scores, targets = link_scores(emb, batch)
    loss = loss_fn("rank")(scores, targets)
    loss.backward()
    assert torch.isfinite(loss) and emb.grad is not None
    metric = LinkRanking()
    metric.update(scores.detach(), targets)
    headline, more = metric_values("mrr", metric.compute())
    assert headline == pytest.approx(17 / 24) and "mrr" not in more and "hits@10_filtered" in more
    assert metric_values("mae", torch.tensor(0.5)) == (0.5, {})
