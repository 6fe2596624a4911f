"""gea_graph.nn"""
from gea_graph.nn.attention import (  # noqa: F401  (global attentions: one dense interface)
    MultiheadAttention, GFSA, PLaplacianAttention, AGFAttention, attention_resolver, to_dense,
    from_dense,
)
from gea_graph.nn.graphormer import (  # noqa: F401
    CentralityEncoding, SpatialEncoding, EdgeEncoding, GraphToken, GraphormerAttnBias,
    GraphormerLayer, batch_edge_offsets,
)
from gea_graph.nn.external_attention import ExternalAttention  # noqa: F401
from gea_graph.nn.geanet import GEANet  # noqa: F401
from gea_graph.nn.mpnn import (  # noqa: F401
    GatedGCNLayer, GCNLayer, GINLayer, GINELayer, mpnn_resolver,
)
from gea_graph.nn.geaet_layer import GEAETLayer  # noqa: F401
from gea_graph.nn.pe_encoders import LapPEEncoder, RWPEEncoder  # noqa: F401
