"""The page's HTML: the shell around the controls, and the fragments the script swaps in.

Every value from the database passes through ``html.escape``, and every string a person or
an assistant wrote (text, metadata, ids, scope and entity names) through ``isolated``, so a
right-to-left override inside it cannot reorder the page around it. Nothing here reads the
database or the request. Score bars carry each part's share of their scale in ``data-share``
(the script turns it into a width, since the page's content policy allows no inline styles).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from html import escape
from importlib.resources import files
from string import Template
from typing import Any

from mcp_server.wording import NOTHING_RELEVANT, learned_line, metadata_value, relevance_line
from store.ranking.scoring import KEYWORD_SOURCES
from store.records import Explanation, HistoryEvent, Memory, ScopeCount, SearchHit

ID_CHARS = 8
SIGNALS = (("semantic", "semantic_score", "meaning"), ("bm25", "bm25_score", "keywords"),
           ("entity", "entity_boost", "entities"))
"""Each part of a fused score: CSS class, ``ScoreBreakdown`` field, label."""
DROP_REASONS = {
    "below_threshold": "below the semantic gate",
    "expired": "expired",
    "filtered": "left out by the metadata filter",
}


def asset(name: str) -> str:
    """A file shipped beside this module (the page, its script and its style sheet)."""
    return files(__package__).joinpath(name).read_text(encoding="utf-8")


def isolated(text: str) -> str:
    """Escaped, in ``<bdi>``: its own direction, whatever control characters it holds."""
    return f"<bdi>{escape(text)}</bdi>"


def attrs(**values: Any) -> str:
    return "".join(f' {name.rstrip("_").replace("_", "-")}="{escape(str(value))}"' for name, value in values.items())


def options(values: Sequence[str], chosen: str, blank: str | None) -> str:
    items = [] if blank is None else [f'<option value="">{escape(blank)}</option>']
    items += [f"<option{attrs(value=v)}{' selected' if v == chosen else ''}>{escape(v)}</option>" for v in values]
    return "".join(items)


def page(
    *, database: str, token: str, scopes: Sequence[ScopeCount], scope: dict[str, str], threshold: float,
    body: str,
) -> str:
    """The whole page: scope pickers filled from the database, the filter and search boxes,
    the live re-rank controls, and the first list of memories."""
    user = scope["user_id"]
    users = sorted({s.user_id for s in scopes if s.user_id} | {user})
    mine = [s for s in scopes if s.user_id == user]
    agents = sorted({s.agent_id for s in mine if s.agent_id})
    runs = sorted({s.run_id for s in mine if s.run_id})
    return Template(asset("page.html")).substitute(
        database=isolated(database),
        token=escape(token),
        users=options(users, user, None),
        agents=options(agents, scope.get("agent_id", ""), "all agents"),
        runs=options(runs, scope.get("run_id", ""), "all runs"),
        threshold=f"{threshold:g}",
        body=body,
    )


def error(message: str) -> str:
    """An engine's message where the page's content would be."""
    return f'<p class="error">{escape(message)}</p>'


def when(stamp: str | None) -> str:
    """An ISO timestamp to the minute, UTC, in a ``<time>`` element."""
    if not stamp:
        return "-"
    return f"<time{attrs(datetime=stamp)}>{escape(stamp[:16].replace('T', ' '))}</time>"


def metadata_chips(metadata: dict[str, Any]) -> str:
    return "".join(
        f'<span class="kv">{isolated(key)}={isolated(metadata_value(value))}</span>' for key, value in metadata.items()
    )


def memory_line(memory: Memory) -> str:
    """The facts under a memory's text: id, scope, times, expiry, metadata."""
    scope = " ".join(
        f"{name}={isolated(value)}" for name, value in (("agent", memory.agent_id), ("run", memory.run_id)) if value
    )
    expiry = f" · expires {escape(memory.expiration_date)}" if memory.expiration_date else ""
    return (
        f'<p class="facts"><code>{isolated(memory.id[:ID_CHARS])}</code> {scope} · created {when(memory.created_at)}'
        f" · updated {when(memory.updated_at)}{expiry} {metadata_chips(memory.metadata)}</p>"
    )


def memory_item(memory: Memory) -> str:
    return (
        f'<li class="memory"{attrs(data_id=memory.id)}><p class="text">{isolated(memory.text)}</p>'
        f"{memory_line(memory)}</li>"
    )


def memory_list(memories: Sequence[Memory], *, offset: int, page_size: int, heading: str) -> str:
    """A page of memories, newest first, with links to the pages before and after, under
    ``heading`` (HTML)."""
    if not memories:
        return f'<h2>{heading}</h2><p class="empty">No memories here.</p>'
    shown = memories[:page_size]
    pager = []
    if offset > 0:
        newer = attrs(data_offset=max(offset - page_size, 0))
        pager.append(f'<button type="button" class="page"{newer}>newer</button>')
    if len(memories) > page_size:
        pager.append(f'<button type="button" class="page"{attrs(data_offset=offset + page_size)}>older</button>')
    return (
        f"<h2>{heading} <small>{offset + 1}–{offset + len(shown)}</small></h2>"
        f'<ol class="memories">{"".join(memory_item(m) for m in shown)}</ol>'
        f'<nav class="pager">{"".join(pager)}</nav>'
    )


def entity_list(memories: Sequence[Memory], name: str, *, page_size: int) -> str:
    """The memories linked to the entity ``name``, newest first."""
    return memory_list(memories, offset=0, page_size=page_size, heading=f"Linked to “{isolated(name)}”")


def segment(css: str, share: float, title: str) -> str:
    """One part of a bar, ``share`` of its width (kept within the bar)."""
    return f"<span{attrs(class_=f'seg {css}', data_share=f'{min(max(share, 0.0), 1.0):.6f}', title=title)}></span>"


def bars(hit: SearchHit) -> str:
    """Two bars. The fused score as stacked parts, each as wide as its share of the denominator;
    under it the meaning (semantic) score on the 0 to 1 scale of the gate slider, with the gate
    marked on it: what passed the gate reaches past the mark."""
    parts = hit.details
    fused = "".join(
        segment(css, getattr(parts, field) / parts.max_possible_score, f"{label} {getattr(parts, field):.3f}")
        for css, field, label in SIGNALS
    )
    meaning = segment("semantic", parts.semantic_score, f"meaning {parts.semantic_score:.3f}")
    gate = attrs(class_="gate", data_left=f"{parts.threshold:.6f}", title=f"semantic gate {parts.threshold:g}")
    return (
        f'<div class="bars"><div class="bar">{fused}</div>'
        f'<div class="bar gauge">{meaning}<span{gate}></span></div></div>'
    )


def table(rows: Sequence[Sequence[str]]) -> str:
    """Rows of a small table, the first cell of each a heading (escaped here), the others HTML."""
    return "<table>" + "".join(
        f"<tr><th>{escape(head)}</th>{''.join(f'<td>{cell}</td>' for cell in cells)}</tr>"
        for head, *cells in rows
    ) + "</table>"


def hit_details(hit: SearchHit) -> str:
    parts = hit.details
    rows = [
        ("semantic", f"{parts.semantic_score:.3f}", "cosine similarity; must reach the gate"),
        ("bm25", f"{parts.bm25_score:.3f}", keyword_note(hit)),
        ("entity", f"{parts.entity_boost:.3f}", entity_note(hit)),
        ("sum", f"{parts.raw_score:.3f}", f"÷ {parts.max_possible_score:g} (the signals that fired)"),
        ("fused", f"{parts.final_score:.3f}", "" if hit.learned is None else "the hand-set fusion's score"),
    ]
    if hit.learned is not None:
        rows.append(("learned", f"{hit.learned.score:.3f}", escape(learned_line(hit.learned))))
    return f'<details class="why"><summary>why this score</summary>{table(rows)}</details>'


def keyword_note(hit: SearchHit) -> str:
    if hit.keyword_source is None:
        return "no keyword score"
    return (
        f"raw BM25 {hit.details.bm25_raw:.2f} through the sigmoid, from {escape(KEYWORD_SOURCES[hit.keyword_source])}"
    )


def entity_note(hit: SearchHit) -> str:
    match = hit.entity_match
    if match is None:
        return "no query entity matched this memory"
    return (
        f"query entity '{isolated(match.query_entity)}' ~ '{isolated(match.entity)}' "
        f"(similarity {match.similarity:.3f}, linked to {match.linked_memories} memories)"
    )


def analysis(explanation: Explanation) -> str:
    """How the query was read and which candidates fell out, and why."""
    a = explanation.analysis
    facts = [
        ("terms", isolated(" ".join(a.lemmatized_terms) or "-")),
        ("bm25 sigmoid", f"midpoint {a.bm25_midpoint:g}, steepness {a.bm25_steepness:g} ({a.term_count} terms)"),
        ("entities", ", ".join(map(isolated, a.entities)) or "-"),
        ("signals", f"{' + '.join(a.signals_active)}; denominator {a.max_possible_score:g}"),
        ("gate", f"semantic ≥ {a.threshold:g}"),
        ("candidates", (f"{a.internal_limit} per signal, {a.candidate_pool} pool"
                       f"{', metadata filter applied' if a.filters_applied else ''}")),
    ]
    dropped = "".join(
        f'<li{attrs(data_id=d.id)}><span class="reason">{escape(DROP_REASONS[d.reason])}</span> '
        f"semantic {d.semantic_score:.3f} · {isolated(d.text)}</li>"
        for d in explanation.dropped
    )
    dropped_part = f'<h3>Dropped ({len(explanation.dropped)})</h3><ul class="dropped">{dropped}</ul>' if dropped else ""
    if explanation.relevance is not None:
        facts.append(("relevance", escape(relevance_line(explanation.relevance).removeprefix("relevance: "))))
    withheld = "".join(hit_item(hit, "withheld") for hit in explanation.withheld)
    withheld_part = (
        f'<h3>Withheld ({len(explanation.withheld)}): the closest memories scored under the bar</h3>'
        f'<ol class="hits withheld">{withheld}</ol>' if withheld else ""
    )
    return (
        f'<details class="analysis" id="explanation"><summary>How the query was read</summary>'
        f"{table(facts)}{withheld_part}{dropped_part}</details>"
    )


def hit_item(hit: SearchHit, kind: str = "hit") -> str:
    """One ranked memory: its score with the signals' bars, its text, its line and its score parts;
    ``kind`` "withheld" for one the decision kept back (shown in the explanation, not a result)."""
    return (
        f'<li class="{kind} memory"{attrs(data_id=hit.memory.id)}>'
        f'<div class="score"><b>{hit.score:.3f}</b>{bars(hit)}</div>'
        f'<p class="text">{isolated(hit.memory.text)}</p>{memory_line(hit.memory)}{hit_details(hit)}</li>'
    )


def search_results(explanation: Explanation) -> str:
    hits = "".join(hit_item(hit) for hit in explanation.hits)
    legend = "".join(f'<span class="key {css}">{label}</span>' for css, _, label in SIGNALS)
    found = f"{len(explanation.hits)} result{'s' * (len(explanation.hits) != 1)}"
    return (
        f'<h2>{found} <small class="legend">{legend}<span class="key gate">semantic gate</span></small></h2>'
        f"{analysis(explanation)}"
        + (f'<ol class="hits">{hits}</ol>' if hits else f'<p class="empty">{empty_state(explanation)}</p>')
    )


def empty_state(explanation: Explanation) -> str:
    """Why a search shows nothing: judged to have no answer here, or nothing passed the gate."""
    if explanation.withheld or (explanation.relevance is not None and not explanation.relevance.answerable):
        return (f'{escape(NOTHING_RELEVANT)} <a href="#explanation" class="why">See why</a>: '
                "the closest memories and what they lacked.")
    return "Nothing passed the gate."


def detail(memory: Memory, entities: Sequence[str], history: Sequence[HistoryEvent]) -> str:
    """One memory to correct: its text and metadata in a form, its entities, its history."""
    chips = "".join(
        f'<button type="button" class="chip"{attrs(data_entity=e)}>{isolated(e)}</button>' for e in entities
    )
    events = "".join(
        f"<li><b>{event.event}</b> {when(event.created_at)}"
        + (f"<br>{isolated(event.new_text)}" if event.new_text and event.new_text != event.old_text else "")
        + (f" <code>{isolated(json.dumps(event.new_metadata, ensure_ascii=False))}</code>"
           if event.new_metadata is not None and event.new_metadata != event.old_metadata else "")
        + "</li>"
        for event in history
    )
    return (
        f"<h2>Correct this memory</h2>{memory_line(memory)}"
        f'<form id="edit"{attrs(data_id=memory.id)}>'
        f'<label>Text<textarea name="text" rows="4" required>{escape(memory.text)}</textarea></label>'
        f'<label>Metadata (JSON object)<textarea name="metadata" rows="3">'
        f"{escape(json.dumps(memory.metadata, ensure_ascii=False, indent=1))}</textarea></label>"
        '<div class="actions"><button type="submit">Save</button>'
        '<button type="button" id="delete" class="danger">Delete…</button></div></form>'
        f'<h3>Entities</h3><p class="chips">{chips or "none"}</p>'
        f'<h3>History</h3><ol class="history">{events}</ol>'
    )
