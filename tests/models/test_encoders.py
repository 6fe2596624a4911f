"""Summed embeddings (OGB's atom and bond encoders, ColumnEmbedding): the embedding bag equals the look-ups."""
import pytest
import torch
from ogb.graphproppred.mol_encoder import AtomEncoder, BondEncoder
from ogb.utils.features import get_atom_feature_dims, get_bond_feature_dims

from gea_graph.models.embeddings import ColumnEmbedding, summed_embeddings
from gea_graph.models.ogb_encoders import AtomFeatureEncoder, BondFeatureEncoder


def _features(n: int, dims: list[int], seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.stack([torch.randint(0, d, (n, ), generator=g) for d in dims], 1)


def _lookups(x, tables):
    return sum(torch.nn.functional.embedding(x[:, i], t) for i, t in enumerate(tables))


@pytest.mark.parametrize("n", [0, 1, 37])
def test_summed_embeddings_equal_the_lookups_with_gradients(n):
    dims = [7, 1, 3, 12]
    tables = [torch.randn(d, 5, dtype=torch.float64, requires_grad=True) for d in dims]
    x = _features(n, dims)
    out = summed_embeddings(x, tables)
    ref = _lookups(x, tables)
    torch.testing.assert_close(out, ref)
    if n:
        g = torch.randn_like(out)
        for mine, theirs in zip(torch.autograd.grad(out, tables, g), torch.autograd.grad(ref, tables, g)):
            torch.testing.assert_close(mine, theirs)


def test_a_broadcast_gradient_and_a_frozen_table():
    # a sum's gradient reaches the backward as a stride-0 tensor; a table without grad gets none
    dims = [300, 4, 300]
    tables = [torch.randn(d, 3, dtype=torch.float64, requires_grad=i != 1) for i, d in enumerate(dims)]
    x = _features(50, dims)
    trained = [tables[0], tables[2]]
    mine = torch.autograd.grad(summed_embeddings(x, tables).sum(), trained)
    theirs = torch.autograd.grad(_lookups(x, tables).sum(), trained)
    for a, b in zip(mine, theirs):
        torch.testing.assert_close(a, b)


@pytest.mark.parametrize("bad", [-1, 3])
def test_an_index_outside_its_table_is_an_index_error(bad):
    x = torch.tensor([[0, 1], [2, bad]])
    with pytest.raises(IndexError):
        summed_embeddings(x, [torch.randn(3, 2), torch.randn(3, 2)])


def test_ogb_encoders_keep_their_parameters_and_outputs():
    torch.manual_seed(0)
    ogb_atoms, ogb_bonds = AtomEncoder(16), BondEncoder(16)
    atoms, bonds = AtomFeatureEncoder(16), BondFeatureEncoder(16)
    assert atoms.state_dict().keys() == ogb_atoms.state_dict().keys()
    assert bonds.state_dict().keys() == ogb_bonds.state_dict().keys()
    atoms.load_state_dict(ogb_atoms.state_dict())
    bonds.load_state_dict(ogb_bonds.state_dict())
    x, e = _features(50, get_atom_feature_dims()), _features(80, get_bond_feature_dims(), seed=1)
    torch.testing.assert_close(atoms(x), ogb_atoms(x))
    torch.testing.assert_close(bonds(e), ogb_bonds(e))
    emb = ColumnEmbedding(2, 6, 8)
    v = _features(9, [6, 6])
    torch.testing.assert_close(emb(v), emb.tables[0](v[:, 0]) + emb.tables[1](v[:, 1]))
    one = ColumnEmbedding(1, 6, 8)
    torch.testing.assert_close(one(v[:, 0]), one.tables[0](v[:, 0]))  # one column given as a vector
