"""gea_graph.nn"""
from gea_graph.nn.attention import (  # noqa: F401  (global attentions: one dense interface)
    GFSA,
    AGFAttention,
    MultiheadAttention,
    PLaplacianAttention,
    attention_resolver,
    from_dense,
    to_dense,
)
from gea_graph.nn.external_attention import ExternalAttention  # noqa: F401
from gea_graph.nn.geaet_layer import GEAETLayer  # noqa: F401
from gea_graph.nn.geanet import GEANet  # noqa: F401
from gea_graph.nn.graphormer import (  # noqa: F401
    CentralityEncoding,
    EdgeEncoding,
    GraphormerAttnBias,
    GraphormerLayer,
    GraphToken,
    SpatialEncoding,
    batch_edge_offsets,
)
from gea_graph.nn.mpnn import (  # noqa: F401
    GatedGCNLayer,
    GCNLayer,
    GINELayer,
    GINLayer,
    MPNNBlock,
    mpnn_resolver,
)
from gea_graph.nn.norm import DistributedBatchNorm  # noqa: F401
from gea_graph.nn.pe_encoders import LapPEEncoder, RWPEEncoder  # noqa: F401
