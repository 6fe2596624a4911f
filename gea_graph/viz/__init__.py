"""gea_graph.viz"""
