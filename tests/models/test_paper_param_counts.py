"""The exact published parameter counts of GEAET Tables 1, 6, 7 and 8, and their derivation.

The paper prints a count per row of Tables 7/8 but no widths. With the authors' Peptides architecture (geaet-notes
2.3: OGB atom encoder of width d - dim_pe, a PE encoder, an OGB bond encoder that is built although GCN ignores it,
6 layers of GCNConv + attention block with a BatchNorm per branch and one after the sum, optionally an FFN, mean
pooling and a GraphGym MLP head) the count is a polynomial in d; :func:`peptides_count` writes it out term by term.
A search over the width d, the FFN and the head depth (and, for GEANet, the units S = d/H that the authors' code
asserts) has exactly one solution per published count, and the recipes use it:

* GCN+Transformer (torch multi-head attention with biases, 4d^2 + 4d whatever the heads): d = 120;
* GCN+GEANet: d = 228 for 2/3/4/6 heads, d = 224 for 8 heads (228 is not divisible by 8);
* both without FFN and with a 3-layer head; no PE = a full-width atom encoder; RWPE = BatchNorm1d(10) +
  Linear(10, 16), the only walk length / PE width that gives the RWPE counts.
"""
import pytest

from gea_graph.cli import main
from gea_graph.models import build_model, count_parameters
from gea_graph.train import load_recipe

ATOM_VOCAB, BOND_VOCAB = 174, 13  # OGB AtomEncoder / BondEncoder rows (sum of the feature vocabularies)
LAPPE_DEEPSET = 2 * 32 + 32 + 32 * 16 + 16  # Linear(2, 32) + Linear(32, 16): 624


def rwpe(walk: int, dim_pe: int, norm: bool) -> int:
    return 2 * walk * norm + walk * dim_pe + dim_pe


def peptides_count(d: int, block: str, heads: int = 4, units: int | None = None, pe: str = "lappe",
                   ffn: bool = False, head_layers: int = 3, outputs: int = 11, walk: int = 10, dim_pe: int = 16,
                   rw_norm: bool = True, bond: bool = True) -> int:
    r"""Parameters of the GEAET Peptides model with a ``block`` (``transformer`` or ``geanet``) beside GCN."""
    pe_dim, pe_params = {"lappe": (16, LAPPE_DEEPSET), "rwpe": (dim_pe, rwpe(walk, dim_pe, rw_norm)),
                         "nope": (0, 0)}[pe]
    encoders = ATOM_VOCAB * (d - pe_dim) + pe_params + BOND_VOCAB * d * bond
    gcn = d * d + d
    if block == "transformer":
        branch = 4 * d * d + 4 * d  # in-projection 3d x d + 3d, out-projection d x d + d
    else:
        s, dh = (units or d // heads), d // heads
        branch = dh * s + s + s * dh + dh  # Linear(d/H, S) and Linear(S, d/H), shared by the heads
    norms = 3 * 2 * d  # BatchNorm after the GCN, after the block, after the sum
    ffn_params = (d * 2 * d + 2 * d) + (2 * d * d + d) if ffn else 0
    head = (head_layers - 1) * (d * d + d) + d * outputs + outputs
    return encoders + 6 * (gcn + branch + norms + ffn_params) + head


# recipe: (published count, block, heads, pe) of GEAET Tables 7 and 8 (Struct models; Func ones have d + 1 fewer)
TABLE_7_8 = {
    **{f"gcn-transformer-peptides-struct-h{h}": (490_571, "transformer", h, "lappe") for h in (2, 3, 4, 6, 8)},
    "gcn-geanet-peptides-struct-h2": (626_219, "geanet", 2, "lappe"),
    "gcn-geanet-peptides-struct-h3": (539_123, "geanet", 3, "lappe"),
    "gcn-geanet-peptides-struct-h4": (508_571, "geanet", 4, "lappe"),
    "gcn-geanet-peptides-struct-h6": (486_683, "geanet", 6, "lappe"),
    "geaet-peptides-struct": (463_211, "geanet", 8, "lappe"),
    "gcn-transformer-peptides-struct-nope": (492_731, "transformer", 4, "nope"),
    "gcn-geanet-peptides-struct-nope": (510_731, "geanet", 4, "nope"),
    "gcn-transformer-peptides-struct-rwpe": (490_143, "transformer", 4, "rwpe"),
    "gcn-geanet-peptides-struct-rwpe": (508_143, "geanet", 4, "rwpe"),
}
FUNC = {"gcn-geanet-peptides-func": "geaet-peptides-struct",
        **{name.replace("-struct", "-func"): name for name in TABLE_7_8 if name != "geaet-peptides-struct"}}


def count(name: str) -> int:
    return count_parameters(build_model(load_recipe(name).model))


@pytest.mark.parametrize("name", sorted(TABLE_7_8))
def test_table_7_8_counts_are_exact(name):
    published, block, heads, pe = TABLE_7_8[name]
    recipe = load_recipe(name)
    assert recipe.paper.params == published and recipe.paper.params_rtol == 0
    assert count(name) == published
    # the analytic count of the recipe's architecture is the built model's
    m = recipe.model
    assert peptides_count(m.hidden, block, heads, m.units, pe, m.ffn, m.head_layers) == published


@pytest.mark.parametrize("name", sorted(FUNC))
def test_func_models_have_one_output_less(name):
    struct = FUNC[name]
    d = load_recipe(name).model.hidden
    assert count(name) == TABLE_7_8[struct][0] - (d + 1)
    assert load_recipe(name).paper.params == TABLE_7_8[struct][0]


def solutions(published: int, block: str, heads: int, pe: str) -> set:
    r"""Every (d, S, FFN, head layers, bond encoder) whose model has ``published`` parameters (S = d/H)."""
    found = set()
    for d in range(heads, 600, heads):
        s = d // heads
        for ffn in (False, True):
            for head_layers in (1, 2, 3):
                for bond in (False, True):
                    if peptides_count(d, block, heads, s, pe, ffn, head_layers, bond=bond) == published:
                        found.add((d, s, ffn, head_layers, bond))
    return found


def test_derivation_has_exactly_one_solution_per_count():
    for name, (published, block, heads, pe) in TABLE_7_8.items():
        d = 224 if heads == 8 and block == "geanet" else 228 if block == "geanet" else 120
        assert solutions(published, block, heads, pe) == {(d, d // heads, False, 3, True)}, name
        assert load_recipe(name).model.hidden == d
    # without the authors' S = d/H the 2-head count has other solutions (e.g. d=228, S=152, a 2-layer head)
    assert peptides_count(228, "geanet", 2, units=152, head_layers=2) == 626_219


def test_rwpe_counts_fix_walk_length_and_width():
    # LapPE -> RWPE changes 490,571 -> 490,143 and 508,571 -> 508,143: only 10 steps, 16 channels, with BatchNorm
    fits = {(walk, dim_pe, norm) for walk in range(1, 33) for dim_pe in range(1, 65) for norm in (False, True)
            if peptides_count(120, "transformer", pe="rwpe", walk=walk, dim_pe=dim_pe, rw_norm=norm) == 490_143}
    assert fits == {(10, 16, True)}
    assert peptides_count(228, "geanet", 4, pe="rwpe") == 508_143


def test_superpixel_counts():
    assert count("geaet-pascalvoc-sp") == 506_213
    assert count("geaet-coco-sp") == 505_661
    coco = load_recipe("geaet-coco-sp")
    assert coco.model.norm == "graph_layer_norm" and coco.model.head_layers == 1 and coco.paper.params == 505_661
    # the authors' COCONode/COCOEdge and VOCNode/VOCEdge standardise the raw columns (buffers, no parameters)
    assert (coco.model.node_encoder, coco.model.edge_encoder) == ("coco", "coco")
    voc = load_recipe("geaet-pascalvoc-sp")
    assert (voc.model.node_encoder, voc.model.edge_encoder) == ("voc", "voc")


def test_info_prints_the_published_count(capsys):
    assert main(["info", "gcn-geanet-peptides-struct-h3"]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "params: 539,123 (paper: 539,123)"
    assert main(["info", "gcn-geanet-peptides-func-h3"]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "params: 538,894 (paper: 539,123, within 0.042%)"
    assert main(["info", "gcn-zinc"]) == 0
    assert "paper" not in capsys.readouterr().out.splitlines()[-1]
