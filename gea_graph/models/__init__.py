"""gea_graph.models"""
