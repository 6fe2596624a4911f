"""gea_graph.data"""
