"""Pass-through of constructor arguments from a recipe (model.layer_args / mpnn_args / attn_args / gea_args /
pe_args): a valid key reaches the module, a bad key errors naming it, a key set twice errors."""
import pytest

from gea_graph.models import ModelConfig, PEConfig, build_model
from gea_graph.models.layer_args import accepted_arguments
from gea_graph.nn import GCNLayer, GEAETLayer, GEANet
from gea_graph.train import RecipeError, load_recipe

BASE = {"family": "geaet", "task": "graph_regression", "out_channels": 1, "hidden": 16, "layers": 1}


def test_valid_keys_reach_the_modules():
    cfg = ModelConfig(**BASE, mpnn="gatedgcn", attn="gfsa", pe=PEConfig(kind="lap", size=4, dim=4),
                      layer_args={"local_dropout": 0.3, "ffn_dropout": 0.05, "ffn_ratio": 3},
                      mpnn_args={"dropout": 0.07, "eps": 1e-5},
                      attn_args={"K": 3, "learn": ["wK"]},
                      gea_args={"eps": None, "edge_head_split": "strided", "out_proj": True},
                      pe_args={"sign_scope": "batch"})
    model = build_model(cfg)
    layer = model.layers[0]
    assert (layer.local_dropout, layer.ffn_dropout, layer.ffn_in.out_features) == (0.3, 0.05, 48)
    assert (layer.mpnn.dropout, layer.mpnn.eps) == (0.07, 1e-5)
    assert layer.attention.K == 3
    gea = layer.gea.attention
    assert gea.eps is None and gea.edge_head_split == "strided" and gea.out is not None
    assert model.pe_encoder.sign_scope == "batch"


def test_graphormer_and_mpnn_families():
    recipe = load_recipe("graphormer-gfsa-zinc", ["model.hidden=16", "model.heads=2", "model.layers=1",
                                                  "model.graphormer.ffn_channels=16",
                                                  "model.attn_args={learn: [wK], bias: false}"])
    attn = build_model(recipe.model).layers[0].attn
    assert attn.K == 2 and attn.learn == ("wK",) and attn.qkv.bias is None
    conv = build_model(ModelConfig(**{**BASE, "family": "mpnn"}, mpnn="gcn",
                                   mpnn_args={"improved": True})).layers[0].mpnn.conv
    assert conv.improved
    with pytest.raises(ValueError, match="model.gea_args: not used"):
        ModelConfig(**{**BASE, "family": "mpnn"}, mpnn="gcn", gea_args={"eps": None})


@pytest.mark.parametrize("section, args, cls", [
    ("layer_args", {"local_dropuot": 0.1}, "GEAETLayer"),
    ("gea_args", {"epsilon": None}, "GEANet"),
    ("mpnn_args", {"bogus": 1}, "GCNLayer"),
    ("attn_args", {"k": 2}, "MultiheadAttention"),
    ("pe_args", {"sign": "batch"}, "LapPEEncoder"),
])
def test_bad_key_names_key_section_class_and_allowed(section, args, cls):
    key = next(iter(args))
    with pytest.raises(ValueError, match=rf"model\.{section}: '{key}' is not an argument of {cls} \(allowed: ") as e:
        ModelConfig(**BASE, mpnn="gcn", pe=PEConfig(kind="lap", size=4, dim=4), **{section: args})
    allowed = str(e.value).split("allowed: ")[1]
    assert {"layer_args": "local_dropout", "gea_args": "eps", "mpnn_args": "improved", "attn_args": "bias",
            "pe_args": "sign_scope"}[section] in allowed


@pytest.mark.parametrize("section, args, field", [
    ("layer_args", {"dropout": 0.2}, "model.dropout"),
    ("layer_args", {"use_ffn": False}, "model.ffn"),
    ("layer_args", {"gea_kwargs": {}}, "model.gea_args"),
    ("gea_args", {"heads": 2}, "model.gea_heads"),
    ("gea_args", {"norm_scope": "batch"}, "model.norm_scope"),
    ("gea_args", {"dropout": 0.1}, "model.layer_args.external_dropout"),
    ("attn_args", {"dropout": 0.1}, "model.attn_dropout"),
    ("mpnn_args", {"channels": 8}, "model.hidden"),
    ("mpnn_args", {"in_channels": 8}, None),  # set by the adapter: not even allowed
    ("pe_args", {"k": 3}, "model.pe.size"),
])
def test_key_set_twice_errors_naming_the_field(section, args, field):
    key = next(iter(args))
    match = rf"model\.{section}\.{key}: already set by {field}" if field else rf"'{key}' is not an argument"
    with pytest.raises(ValueError, match=match):
        ModelConfig(**BASE, mpnn="gcn", pe=PEConfig(kind="lap", size=4, dim=4), **{section: args})


def test_recipe_loading_reports_the_file():
    with pytest.raises(RecipeError, match=r"geaet-peptides-struct\.yaml: model\.gea_args: 'foo'"):
        load_recipe("geaet-peptides-struct", ["model.gea_args={foo: 1}"])
    with pytest.raises(RecipeError, match="must be a mapping"):
        load_recipe("geaet-peptides-struct", ["model.gea_args=3"])


def test_signature_following_and_layer_guard():
    assert {"eps", "edge_head_split", "out_proj"} <= accepted_arguments(GEANet)  # GEANet's **kwargs
    assert {"improved", "aggr"} <= accepted_arguments(GCNLayer) and "in_channels" not in accepted_arguments(GCNLayer)
    with pytest.raises(ValueError, match=r"gea_kwargs\['heads'\] is set by the layer argument 'gea_heads'"):
        GEAETLayer(16, mpnn="gcn", attn=None, gea_kwargs={"heads": 2})
