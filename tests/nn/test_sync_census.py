"""The host-sync census counts exactly the operations that make the host wait for the device."""
import pytest
import torch

from gea_graph.nn.sync_census import SyncCensus

t = torch.tensor([1, 2, 3])
m = t > 1

SYNCS = {
    "item": lambda: t[0].item(),
    "bool": lambda: bool(m.any()),
    "int": lambda: int(t.max()),
    "tolist": lambda: t.tolist(),
    "cpu": lambda: t.cpu(),
    "numpy": lambda: t.numpy(),
    "nonzero": lambda: t.nonzero(),
    "where with one argument": lambda: torch.where(m),
    "boolean mask index": lambda: t[m],
    "boolean mask assignment": lambda: t.clone().__setitem__(m, 0),
    "masked_select": lambda: t.masked_select(m),
    "unique": lambda: t.unique(),
    "bincount": lambda: torch.bincount(t),
    "repeat_interleave without output_size": lambda: torch.repeat_interleave(t, t),
    "equal": lambda: torch.equal(t, t),
}

NO_SYNCS = {
    "arithmetic and reductions": lambda: (t + 1, t.max(), t.float().mean(), m.any()),
    "integer index": lambda: t[torch.tensor([0, 2])],
    "nonzero_static": lambda: torch.nonzero_static(m, size=2),
    "repeat_interleave with output_size": lambda: torch.repeat_interleave(t, t, output_size=6),
    "masked_fill": lambda: t.masked_fill(m, 0),
}


@pytest.mark.parametrize("name", SYNCS)
def test_counts_each_sync_once(name):
    with SyncCensus() as census:
        SYNCS[name]()
    assert census.count == 1, census.report()
    assert "test_sync_census.py" in census.events[0].where


@pytest.mark.parametrize("name", NO_SYNCS)
def test_ignores_what_does_not_sync(name):
    with SyncCensus() as census:
        NO_SYNCS[name]()
    assert census.count == 0, census.report()


def test_report_groups_by_site_and_counts_accumulate():
    census = SyncCensus()
    for _ in range(2):
        with census:
            for _ in range(3):
                t[0].item()
    assert census.count == 6
    ((op, _where), n), = census.by_site().items()
    assert n == 6 and op == "aten._local_scalar_dense.default"
    assert census.report().startswith("   6 x aten._local_scalar_dense.default at ")
    assert SyncCensus().report() == "no host syncs"
