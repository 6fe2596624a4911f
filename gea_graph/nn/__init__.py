"""gea_graph.nn"""
