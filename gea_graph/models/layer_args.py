r"""Pass-through of layer arguments: a recipe reaches every constructor argument of the classes its model builds.

The top-level fields of :class:`~gea_graph.models.ModelConfig` set the common choices (``hidden``, ``heads``,
``dropout``, ``norm_scope``, ...). Every other constructor argument is given by name in one of five sections and handed
to the class unchanged, so a new layer option needs no new config field:

========================  ==============================================================================================
section                   receives
========================  ==============================================================================================
``model.layer_args``      the layer: :class:`~gea_graph.nn.GEAETLayer` (family ``geaet``),
                          :class:`~gea_graph.nn.MPNNBlock` (``mpnn``) or :class:`~gea_graph.nn.GraphormerLayer`
                          (``graphormer``), e.g. ``local_dropout``, ``activation_dropout``
``model.mpnn_args``       the MPNN branch (:func:`~gea_graph.nn.mpnn_resolver`'s class, e.g.
                          :class:`~gea_graph.nn.GatedGCNLayer`; PyG convolution arguments through the adapters)
``model.attn_args``       the global attention (:func:`~gea_graph.nn.attention.attention_class`, e.g.
                          :class:`~gea_graph.nn.GFSA`)
``model.gea_args``        :class:`~gea_graph.nn.GEANet` and through it :class:`~gea_graph.nn.ExternalAttention`,
                          e.g. ``eps``, ``edge_head_split``
``model.pe_args``         the PE encoder (:class:`~gea_graph.nn.LapPEEncoder` or :class:`~gea_graph.nn.RWPEEncoder`)
========================  ==============================================================================================

Every key is checked against the target class's signature (:func:`inspect.signature`; a class whose ``**kwargs`` go
to another class is followed, see :data:`KWARGS_TARGETS`) when the config is made, so a bad key fails when the
recipe is loaded, with an error naming the section, the key, the class and the allowed keys. A key that a top-level
field (or the layer itself) already sets is an error too, naming the field to use instead.
"""
from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Any

from torch.nn import Module
from torch_geometric.nn import GCNConv, GINConv, GINEConv

from gea_graph.nn import (
    ExternalAttention,
    GCNLayer,
    GEAETLayer,
    GEANet,
    GINELayer,
    GINLayer,
    GraphormerLayer,
    LapPEEncoder,
    MPNNBlock,
    RWPEEncoder,
    mpnn_resolver,
)
from gea_graph.nn.attention import attention_class

#: A :class:`~gea_graph.models.ModelConfig`. Not imported: :mod:`gea_graph.models.config` calls
#: :func:`check_layer_args` when a config is made, so this module must not import it back.
ModelConfig = Any

SECTIONS = ("layer_args", "mpnn_args", "attn_args", "gea_args", "pe_args")

#: Where a class's ``**kwargs`` go: ``{class: (target class, target arguments the class sets itself)}``. A class
#: not listed hands them to its base class (as PyG's convolutions do to
#: :class:`~torch_geometric.nn.conv.MessagePassing`); :class:`torch.nn.Module` takes none.
KWARGS_TARGETS: dict[type, tuple[type, tuple[str, ...]]] = {
    GEANet: (ExternalAttention, ("channels", "heads", "units", "edge_units", "shared_unit", "norm_scope")),
    GCNLayer: (GCNConv, ("in_channels", "out_channels")),
    GINLayer: (GINConv, ("nn", )),
    GINELayer: (GINEConv, ("nn", "edge_dim")),
}

# Layer argument <- ModelConfig field, per layer class. These fields are the only arguments the models set; every
# other argument of the layer comes from ``model.layer_args``.
_GEAET_FIELDS = {
    "channels": "hidden", "mpnn": "mpnn", "attn": "attn", "gea": "gea", "heads": "heads", "gea_heads": "gea_heads",
    "units": "units", "edge_units": "edge_units", "shared_unit": "shared_unit", "norm_scope": "norm_scope",
    "norm": "norm", "act": "act", "use_ffn": "ffn", "dropout": "dropout", "attn_dropout": "attn_dropout",
    "attn_impl": "attn_impl",
    "local_out_act": "local_out_act", "mpnn_kwargs": "mpnn_args", "attn_kwargs": "attn_args",
    "gea_kwargs": "gea_args",
}
_MPNN_FIELDS = {k: _GEAET_FIELDS[k] for k in ("channels", "mpnn", "norm", "act", "dropout", "mpnn_kwargs")}
# The MPNN arguments MPNNBlock sets itself, named by the recipe key that sets them.
_MPNN_BLOCK_TAKEN = {"channels": "model.hidden", "act": "model.act"}
_GRAPHORMER_FIELDS = {
    "channels": "hidden", "heads": "heads", "attn": "attn", "ffn_channels": "graphormer.ffn_channels",
    "dropout": "dropout", "attn_dropout": "attn_dropout", "pre_norm": "graphormer.pre_norm",
    "attn_kwargs": "attn_args", "attn_impl": "attn_impl",
}
_PE_JOIN = "the model (the PE is concatenated to a node embedding of width hidden - pe.dim)"
_PE_FIELDS = {
    "lap": {"dim_pe": "pe.dim", "model": "pe.encoder", "num_layers": "pe.layers", "k": "pe.size"},
    "rw": {"walk_length": "pe.size", "dim_pe": "pe.dim"},
}


def accepted_arguments(cls: type) -> set[str]:
    r"""The keyword arguments ``cls(...)`` accepts: the named parameters of its ``__init__``, and those of the class
    its ``**kwargs`` go to (:data:`KWARGS_TARGETS`, else its nearest base class with an ``__init__``)."""
    params = list(inspect.signature(cls.__init__).parameters.values())[1:]  # without self
    names = {p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    if any(p.kind is p.VAR_KEYWORD for p in params):
        target, fixed = KWARGS_TARGETS.get(cls, (None, ()))
        if target is None:
            target = next((b for b in cls.__mro__[1:] if "__init__" in vars(b)), None)
        if target is not None and target not in (Module, object):
            names |= accepted_arguments(target) - set(fixed)
    return names


def check_arguments(section: str, cls: type, args: Mapping[str, Any], taken: Mapping[str, str]) -> None:
    r"""Raises :class:`ValueError` unless every key of ``args`` is an argument of ``cls`` not in ``taken``
    (``{argument: where it is set}``)."""
    allowed = accepted_arguments(cls)
    for key in args:
        if key in taken:
            raise ValueError(f"model.{section}.{key}: already set by {taken[key]}; set it there")
        if key not in allowed:
            free = ", ".join(sorted(allowed - set(taken))) or "none"
            raise ValueError(f"model.{section}: {key!r} is not an argument of {cls.__name__} (allowed: {free})")


def _taken(fields: Mapping[str, str]) -> dict[str, str]:
    return {arg: f"model.{field}" for arg, field in fields.items()}


def _branch_taken(branch: str, fields: Mapping[str, str]) -> dict[str, str]:
    # The branch arguments GEAETLayer sets, named by the recipe key that sets them.
    return {arg: f"model.{fields[layer_arg]}" if layer_arg in fields else f"model.layer_args.{layer_arg}"
            for arg, layer_arg in GEAETLayer.branch_arguments[branch].items()}


def _mpnn_class(name: str) -> type:
    # mpnn_resolver holds the one registry of MPNN names; a 1-channel instance costs nothing.
    return type(mpnn_resolver(name, 1))


def _unused(cfg: ModelConfig, section: str, why: str) -> None:
    if getattr(cfg, section):
        raise ValueError(f"model.{section}: not used, {why}")


def check_layer_args(cfg: ModelConfig) -> None:
    r"""Checks the five pass-through sections of ``cfg`` (see the module doc); raises :class:`ValueError`."""
    for section in SECTIONS:
        value = getattr(cfg, section)
        if not isinstance(value, Mapping) or not all(isinstance(k, str) for k in value):
            raise ValueError(f"model.{section} must be a mapping of argument names to values, got {value!r}")
    if cfg.family == "graphormer":
        check_arguments("layer_args", GraphormerLayer, cfg.layer_args, _taken(_GRAPHORMER_FIELDS))
        attn_taken = {"channels": "model.hidden", "heads": "model.heads", "dropout": "model.attn_dropout",
                      "impl": "model.attn_impl"}
        if attention_class(cfg.attn) is attention_class("gfsa"):
            attn_taken["K"] = "model.graphormer.gfsa_k"
        check_arguments("attn_args", attention_class(cfg.attn), cfg.attn_args, attn_taken)
        _unused(cfg, "mpnn_args", "the graphormer family has no MPNN branch")
        _unused(cfg, "gea_args", "the graphormer family has no GEANet branch")
    elif cfg.family == "mpnn":
        check_arguments("layer_args", MPNNBlock, cfg.layer_args, _taken(_MPNN_FIELDS))
        check_arguments("mpnn_args", _mpnn_class(cfg.mpnn), cfg.mpnn_args, _MPNN_BLOCK_TAKEN)
        _unused(cfg, "attn_args", "the mpnn family has no attention branch")
        _unused(cfg, "gea_args", "the mpnn family has no GEANet branch")
    else:
        check_arguments("layer_args", GEAETLayer, cfg.layer_args, _taken(_GEAET_FIELDS))
        if cfg.mpnn is None:
            _unused(cfg, "mpnn_args", "model.mpnn is null")
        else:
            check_arguments("mpnn_args", _mpnn_class(cfg.mpnn), cfg.mpnn_args,
                            _branch_taken("mpnn", _GEAET_FIELDS))
        if cfg.attn is None:
            _unused(cfg, "attn_args", "model.attn is null")
        else:
            check_arguments("attn_args", attention_class(cfg.attn), cfg.attn_args,
                            _branch_taken("attn", _GEAET_FIELDS))
        if not cfg.gea:
            _unused(cfg, "gea_args", "model.gea is false")
        else:
            check_arguments("gea_args", GEANet, cfg.gea_args, _branch_taken("gea", _GEAET_FIELDS))
    if cfg.pe is None:
        _unused(cfg, "pe_args", "model.pe is null")
    else:
        cls = LapPEEncoder if cfg.pe.kind == "lap" else RWPEEncoder
        pe_taken = {k: f"model.{v}" for k, v in _PE_FIELDS.get(cfg.pe.kind, {}).items()}
        pe_taken.update(mode=_PE_JOIN, in_channels=_PE_JOIN, out_channels=_PE_JOIN)
        check_arguments("pe_args", cls, cfg.pe_args, pe_taken)


def _resolve(cfg: ModelConfig, field: str) -> Any:
    value: Any = cfg
    for part in field.split("."):
        value = getattr(value, part)
    return value


def geaet_layer_kwargs(cfg: ModelConfig) -> dict[str, Any]:
    r"""The arguments of each :class:`~gea_graph.nn.GEAETLayer` of ``cfg`` (family ``geaet``)."""
    return {**{arg: _resolve(cfg, field) for arg, field in _GEAET_FIELDS.items()}, **cfg.layer_args}


def mpnn_block_kwargs(cfg: ModelConfig) -> dict[str, Any]:
    r"""The arguments of each :class:`~gea_graph.nn.MPNNBlock` of ``cfg`` (family ``mpnn``)."""
    return {**{arg: _resolve(cfg, field) for arg, field in _MPNN_FIELDS.items()}, **cfg.layer_args}


def graphormer_layer_kwargs(cfg: ModelConfig) -> dict[str, Any]:
    r"""The arguments of each :class:`~gea_graph.nn.GraphormerLayer` of ``cfg``."""
    kwargs = {arg: _resolve(cfg, field) for arg, field in _GRAPHORMER_FIELDS.items()}
    attn_kwargs = {"K": cfg.graphormer.gfsa_k} if attention_class(cfg.attn) is attention_class("gfsa") else {}
    kwargs["attn_kwargs"] = {**attn_kwargs, **cfg.attn_args}
    return {**kwargs, **cfg.layer_args}
