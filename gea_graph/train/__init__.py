"""gea_graph.train"""
