"""The SQL both database backends share, above their drivers.

``text`` holds a memory row's columns and the scope and live-memory conditions; ``keywords``
holds the keyword rule (terms folded as FTS5's unicode61 folds them, and FTS5's BM25 as SQL
expressions). Each backend fills in its own placeholder; none of this imports a driver.
"""
