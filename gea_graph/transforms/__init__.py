"""gea_graph.transforms"""
