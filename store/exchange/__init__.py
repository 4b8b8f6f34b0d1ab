"""Exchange: memories moved in and out of a store.

``transfer`` writes and reads trimem's own export format (JSON Lines); ``peers`` reads the
exports of other memory servers into the same shape.
"""
