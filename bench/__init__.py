"""Reproducible benchmarks: retrieval quality on LoCoMo, speed and memory.

Every benchmark runs one way, ``python -m bench NAME [options]``; ``python -m bench`` lists
them. Each prints Markdown tables and rewrites its own section of ``docs/benchmarks.md``.

The benchmarks are thin scripts over a toolkit they share: ``locomo`` (the data),
``corpus`` (texts and questions from it), ``replay`` (the models, and the stand-in that
builds large scopes), ``scope_search`` (one scope grown and searched beside its floors),
``stages`` (an engine call timed by stage), ``timing`` (p50 and p95), ``metrics`` (ranking
metrics), ``sqlite_file`` (a benchmark's database file), ``postgres`` (a server for a run)
and ``report`` (tables, the environment, the doc's sections).
"""
