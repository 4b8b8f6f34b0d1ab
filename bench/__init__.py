"""Reproducible benchmarks: retrieval quality on LoCoMo, speed and memory.

Run ``python bench/quality.py`` and ``python bench/speed.py`` (or ``python -m bench
quality|speed``); each prints Markdown tables and rewrites its own section of
``docs/benchmarks.md``.
"""
