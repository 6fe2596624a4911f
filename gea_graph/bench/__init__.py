"""gea_graph.bench"""
