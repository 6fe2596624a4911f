"""gea_graph.diagnostics"""
