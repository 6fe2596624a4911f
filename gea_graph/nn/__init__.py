"""gea_graph.nn"""
from gea_graph.nn.attention import (  # noqa: F401  (global attentions: one dense interface)
    MultiheadAttention, attention_resolver, to_dense, from_dense,
)
