"""Analysis: what trimem reads out of a text before it stores or searches it.

The embedding model (``embeddings``, run under ONNX Runtime from ``onnx_cache``), spaCy
(``nlp``) with the entity rules (``entities``) and keyword terms (``terms``), the links
between a memory and its entities (``linking``), and the re-analysis of a store written by
older rules (``reanalysis``). Heavy libraries load on first use (``imports``).
"""
