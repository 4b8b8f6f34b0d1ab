"""``trimem search --explain``: an ``Explanation`` as a table people can read in a terminal."""

from __future__ import annotations

from store.records import Explanation
from store.scoring import KEYWORD_SOURCES

TEXT_WIDTH = 48
COLUMNS = ("rank", "final", "semantic", "bm25", "bm25_raw", "entity", "raw", "max", "id", "text")


def render(explanation: Explanation) -> str:
    """The query analysis, one row per result with every score part, then the dropped candidates."""
    analysis = explanation.analysis
    lines = [
        f"terms ({analysis.term_count}): {' '.join(analysis.lemmatized_terms) or '-'}",
        f"bm25 sigmoid: midpoint {analysis.bm25_midpoint:g}, steepness {analysis.bm25_steepness:g}",
        f"entities: {', '.join(analysis.entities) or '-'}",
        f"signals: {' + '.join(analysis.signals_active)} (max possible {analysis.max_possible_score:g}); "
        f"threshold {analysis.threshold:g}; {analysis.internal_limit} candidates per signal "
        f"({analysis.candidate_pool} pool){'; filtered' if analysis.filters_applied else ''}",
        "",
    ]
    rows = []
    for rank, hit in enumerate(explanation.hits, 1):
        parts = hit.details
        rows.append(
            (
                str(rank), f"{parts.final_score:.3f}", f"{parts.semantic_score:.3f}", f"{parts.bm25_score:.3f}",
                f"{parts.bm25_raw:.2f}", f"{parts.entity_boost:.3f}", f"{parts.raw_score:.3f}",
                f"{parts.max_possible_score:g}", hit.memory.id[:8], _short(hit.memory.text),
            )
        )
    lines.extend(_table(COLUMNS, rows) if rows else ["(no results)"])
    for hit in explanation.hits:
        if hit.keyword_source not in (None, "own"):
            lines.append(f"keywords {hit.memory.id[:8]}: {KEYWORD_SOURCES[hit.keyword_source]}")
        if hit.entity_match is not None:
            match = hit.entity_match
            lines.append(
                f"entity {hit.memory.id[:8]}: '{match.query_entity}' ~ '{match.entity}' "
                f"(similarity {match.similarity:.3f}, linked to {match.linked_memories})"
            )
    if explanation.dropped:
        lines.extend(["", "dropped:"])
        lines.extend(
            f"  {d.id[:8]}  {d.reason:<15}  semantic {d.semantic_score:.3f}  {_short(d.text)}"
            for d in explanation.dropped
        )
    return "\n".join(lines)


def _short(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= TEXT_WIDTH else text[: TEXT_WIDTH - 1] + "…"


def _table(header: tuple[str, ...], rows: list[tuple[str, ...]]) -> list[str]:
    widths = [max(len(cell) for cell in column) for column in zip(header, *rows, strict=True)]

    def line(cells: tuple[str, ...]) -> str:
        return "  ".join(cell.ljust(width) for cell, width in zip(cells, widths, strict=True)).rstrip()

    return [line(header), line(tuple("-" * width for width in widths)), *(line(row) for row in rows)]
