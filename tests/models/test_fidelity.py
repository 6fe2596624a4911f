"""The paper-copy recipes build models that carry the authors' settings listed in docs/fidelity.md (read from the
built modules and the data spec, not from the recipe text); the -pergraph variants differ only in GEA's scope."""
from pathlib import Path

import pytest
import torch

from gea_graph.models import build_model
from gea_graph.nn import GatedGCNLayer, LapPEEncoder
from gea_graph.train import load_recipe
from gea_graph.transforms import LapPE, parse_pe

ROOT = Path(__file__).resolve().parents[2]
RECIPES = sorted(p.stem for p in (ROOT / "models").glob("*.yaml"))
GEAET_COPIES = [n for n in RECIPES if not n.endswith("-pergraph") and (r := load_recipe(n)).paper is not None
                and r.paper.source.startswith("GEAET")]
PEPTIDES_GCN = ("geaet-peptides-struct", "gcn-geanet-peptides-func")  # the authors' peptides-struct config


def _built(name):
    recipe = load_recipe(name)
    return recipe, build_model(recipe.model)


@pytest.mark.parametrize("name", GEAET_COPIES)
def test_geaet_copies_compute_gea_and_lappe_as_the_authors_code(name):
    recipe, model = _built(name)
    for layer in model.layers:
        if getattr(layer, "gea", None) is None:
            continue
        gea = layer.gea.attention
        assert gea.norm_scope == "batch" and gea.eps is None  # softmax over the mini-batch, no epsilon
        assert gea.units == gea.head_channels and gea.out is None  # S = d/H, no W_o (their assert; Eq. 5's W_o off)
        assert gea.node_key.bias is not None and gea.shared is None and not gea.edge_units
    if recipe.model.pe is not None and recipe.model.pe.kind == "lap":  # GraphGPS's LapPE and its encoder
        lap = parse_pe(recipe.data.pe)
        assert isinstance(lap, LapPE) and lap.k == recipe.model.pe.size == 10
        assert (lap.normalization, lap.keep_trivial, lap.padding) == (None, True, "nan")
        assert isinstance(model.pe_encoder, LapPEEncoder) and model.pe_encoder.sign_scope == "batch"
        assert model.pe_encoder.mode == "concat" and model.pe_encoder.dim_pe == 16 and model.pe_encoder.sign_flip


def test_the_fidelity_table_names_the_recipes_and_keys_checked_here():
    assert {"geaet-peptides-struct", "geaet-pascalvoc-sp", *PEPTIDES_GCN} <= set(GEAET_COPIES)
    text = (ROOT / "docs" / "fidelity.md").read_text()
    for key in ("model.norm_scope: batch", "model.gea_args: {eps: null}", "model.pe_args: {sign_scope: batch}",
                "lap:10:norm=none", "trivial=keep", "pad=nan", "local_dropout: 0.1, external_dropout: 0.05",
                "geaet-peptides-struct", "geaet-pascalvoc-sp", "-pergraph"):
        assert key in text, key


@pytest.mark.parametrize("name", PEPTIDES_GCN)
def test_peptides_branches_as_configs_geaet_peptides_struct(name):
    recipe, model = _built(name)
    for layer in model.layers:
        assert layer.attention is None and layer.ffn_in is None  # GCN+None+GEANet, use_ffn False
        assert (layer.local_dropout, layer.gea.dropout) == (0.1, 0.05)  # local 0.1, external 0.05
        assert layer.local_out_act and isinstance(layer.act, torch.nn.GELU)
        for norm in (layer.norm_local, layer.gea.norm, layer.norm_out):
            assert isinstance(norm.module, torch.nn.BatchNorm1d)
        assert layer.gea.attention.heads == 8 and layer.gea.attention.units == 28
    assert recipe.model.pooling == "mean" and len(model.head.lins) == 2 and model.head.dropout.p == 0.1


PEPTIDES_GEANET = [n for n in GEAET_COPIES
                   if "peptides" in n and (m := load_recipe(n).model).family == "geaet" and m.gea]


@pytest.mark.parametrize("name", PEPTIDES_GEANET)
def test_peptides_geanet_copies_take_the_peptides_struct_dropouts(name):
    # configs/GEAET/peptides-struct.yaml: local 0.1, external 0.05; gt.local_out_act reaches every MPNN but the
    # GatedGCN, which their layer never passes through it
    recipe, model = _built(name)
    for layer in model.layers:
        assert (layer.local_dropout, layer.gea.dropout) == (0.1, 0.05)
        assert layer.local_out_act == (recipe.model.mpnn != "gatedgcn")
        if recipe.model.mpnn == "gatedgcn":  # CustomGatedGCN's own dropout is gt.ffn_dropout
            assert layer.mpnn.dropout == 0.05


def test_pascalvoc_branches_as_configs_geaet_vocsp():
    _, model = _built("geaet-pascalvoc-sp")
    for layer in model.layers:
        assert (layer.local_dropout, layer.global_dropout, layer.external_dropout, layer.ffn_dropout) == (0.1,) * 4
        assert isinstance(layer.mpnn, GatedGCNLayer) and layer.mpnn.dropout == 0.1  # their ffn_dropout, also 0.1
        assert layer.attention.dropout == 0.5 and layer.attention.heads == 4
        assert layer.ffn_in.out_features == 2 * 68 and isinstance(layer.norm_out.module, torch.nn.BatchNorm1d)
        assert layer.gea.attention.heads == 4 and layer.gea.attention.units == 17


@pytest.mark.parametrize("name", [n for n in RECIPES if n.endswith("-pergraph")])
def test_pergraph_variants_differ_only_in_gea_scope(name):
    variant, authors = load_recipe(name).to_dict(), load_recipe(name.removesuffix("-pergraph")).to_dict()
    assert (variant["model"].pop("norm_scope"), authors["model"].pop("norm_scope")) == ("graph", "batch")
    for d in (variant, authors):
        d.pop("name"), d.pop("description")
    assert variant == authors


@pytest.mark.parametrize("name, epochs", [("gcn-pascalvoc-sp", 1000), ("gine-pascalvoc-sp", 1000),
                                          ("gatedgcn-pascalvoc-sp", 500), ("gcn-coco-sp", 500)])
def test_lrgb_superpixel_baselines_train_as_long_as_their_configs(name, epochs):
    # max_epoch of LRGB's configs/GCN/vocsuperpixels-GCN.yaml, configs/GINE/vocsuperpixels-GINE+LapPE.yaml,
    # configs/GatedGCN/vocsuperpixels-GatedGCN+LapPE.yaml and configs/GCN/cocosuperpixels-GCN.yaml
    assert load_recipe(name).trainer.max_epochs == epochs


@pytest.mark.parametrize("name, patience", [("gcn-peptides-func", 20), ("gatedgcn-peptides-struct", 20),
                                            ("gine-pascalvoc-sp", 10), ("gcn-pcqm-contact", 10),
                                            ("transformer-pcqm-contact", 10)])
def test_lrgb_baselines_reduce_on_plateau_as_their_configs(name, patience):
    # LRGB's configs: scheduler reduce_on_plateau, reduce_factor 0.5, min_lr 1e-5, schedule_patience 20 (Peptides)
    # or 10 (PascalVOC-SP, COCO-SP, PCQM-Contact)
    optim = load_recipe(name).optim
    assert (optim.schedule, optim.factor, optim.patience, optim.min_lr) == ("plateau", 0.5, patience, 1e-5)


@pytest.mark.parametrize("name", ["gcn-zinc", "gin-zinc", "gatedgcn-zinc"])
def test_benchmarking_gnns_zinc_baselines_as_their_configs(name):
    # configs/molecules_graph_regression_{GCN,GIN,GatedGCN}_ZINC_500k.json: lr 1e-3 halved after 10 epochs without
    # improvement down to 1e-5, batch 128, 1000 epochs; GIN reads out with a sum, the others with a mean
    recipe = load_recipe(name)
    optim = recipe.optim
    assert (optim.lr, optim.schedule, optim.factor, optim.patience, optim.min_lr) == (1e-3, "plateau", 0.5, 10, 1e-5)
    assert (recipe.trainer.batch_size, recipe.trainer.max_epochs) == (128, 1000)
    assert recipe.model.pooling == ("add" if name == "gin-zinc" else "mean")
