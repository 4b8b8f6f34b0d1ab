"""``trimem search --explain``: an ``Explanation`` as a table people can read in a terminal."""

from __future__ import annotations

from mcp_server.cli.tables import note, table
from mcp_server.wording import learned_line, relevance_line
from store.ranking.scoring import KEYWORD_SOURCES
from store.records import Explanation, short_id

COLUMNS = ("rank", "score", "fused", "semantic", "bm25", "bm25_raw", "entity", "raw", "max", "id", "text")
DROPPED_COLUMNS = ("id", "reason", "semantic", "text")


def render(explanation: Explanation, width: int) -> str:
    """The query analysis, one row per result with its score and every part of the fused score
    (under learned fusion, a line per result says how the model made the score), then the dropped
    candidates; texts are wrapped to ``width`` (beside the numbers when there is room, else below)."""
    analysis = explanation.analysis
    summary = (
        f"terms ({analysis.term_count}): {' '.join(analysis.lemmatized_terms) or '-'}",
        f"bm25 sigmoid: midpoint {analysis.bm25_midpoint:g}, steepness {analysis.bm25_steepness:g}",
        f"entities: {', '.join(analysis.entities) or '-'}",
        (f"signals: {' + '.join(analysis.signals_active)} (max possible {analysis.max_possible_score:g}); "
        f"threshold {analysis.threshold:g}; {analysis.internal_limit} candidates per signal "
        f"({analysis.candidate_pool} pool){'; filtered' if analysis.filters_applied else ''}"),
    )
    if explanation.relevance is not None:
        summary = (*summary, relevance_line(explanation.relevance))
    lines = [*(note(line, width) for line in summary), ""]
    shown = explanation.hits or explanation.withheld
    if explanation.withheld:
        lines.append(note("nothing returned; these are the memories it would have returned:", width))
    rows = []
    for rank, hit in enumerate(shown, 1):
        parts = hit.details
        rows.append(
            (
                str(rank), f"{hit.score:.3f}", f"{parts.final_score:.3f}", f"{parts.semantic_score:.3f}",
                f"{parts.bm25_score:.3f}", f"{parts.bm25_raw:.2f}", f"{parts.entity_boost:.3f}", f"{parts.raw_score:.3f}",
                f"{parts.max_possible_score:g}", short_id(hit.memory.id), hit.memory.text,
            )
        )
    lines.append(table(COLUMNS, rows, width) if rows else "(no results)")
    for hit in shown:
        if hit.learned is not None:
            lines.append(note(f"{short_id(hit.memory.id)} {learned_line(hit.learned)}", width))
        if hit.keyword_source not in (None, "own"):
            lines.append(note(f"keywords {short_id(hit.memory.id)}: {KEYWORD_SOURCES[hit.keyword_source]}",
                              width))
        if hit.entity_match is not None:
            match = hit.entity_match
            lines.append(note(
                f"entity {short_id(hit.memory.id)}: '{match.query_entity}' ~ '{match.entity}' "
                f"(similarity {match.similarity:.3f}, linked to {match.linked_memories})", width
            ))
    if explanation.dropped:
        dropped = [(short_id(d.id), d.reason, f"{d.semantic_score:.3f}", d.text) for d in explanation.dropped]
        lines.extend(["", "dropped:", table(DROPPED_COLUMNS, dropped, width)])
    return "\n".join(lines)
