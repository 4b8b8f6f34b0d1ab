"""Ranking: a query's signals fused into one ordered answer, or into "nothing relevant".

``retrieval`` runs the four steps (prepare, signals, fuse, assemble) over a backend
snapshot; ``scoring`` is the pure fusion arithmetic (Mem0's formulas and trimem's measured
departures); ``relevance`` decides whether the scope holds an answer at all.
"""
