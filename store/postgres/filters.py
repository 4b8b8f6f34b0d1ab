"""TEMPORARY placeholder until the JSONB compiler lands."""
def filter_sql(parsed, alias="m"):
    if parsed is None:
        return "TRUE", []
    raise NotImplementedError
