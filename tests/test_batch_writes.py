"""A batch of memories is written in a few statements (``store.writes``: rows, vectors and
postings together, names resolved at once, links and events together) and stores exactly what
writing the same memories one at a time stores: the same entities, each memory linked to the
same names, the same events."""

from __future__ import annotations

from collections.abc import Callable

from store import Config, Engine, MemoryInput
from store.scope import Scope

TURNS = [
    "Caroline: I went to the LGBTQ support group in New York yesterday.",
    "Melanie: That's great, Caroline! Did Dr. Smith run it again?",
    "Caroline: Yes, Dr Smith was there, and Melanie's sister came too.",
    "Melanie: My sister loved New York City. She wants to move to NYC.",
    "Caroline: I'm researching adoption agencies with Dr. Smith's help.",
    "Melanie: Caroline, painting with my kids in Boston calmed me down.",
]


def stored(engine: Engine, user_id: str) -> tuple[dict[str, list[str]], int, dict[str, list[str]]]:
    """Each memory's linked entity names (by text), how many entities there are, and each
    memory's events (by text)."""
    scope = Scope(user_id)
    with engine.backend.snapshot() as view:
        rows = view.list_memories(scope, None, None, 100, 0)
        links = {row.text: view.memory_entity_names(row.rowid, scope) for row in rows}
        entities = view.counts()["entities"]
        events = {row.text: [event.event for event in view.history(row.id, scope)] for row in rows}
    return links, entities, events


def test_a_batch_stores_what_one_at_a_time_stores(
    engine: Engine, another_store: Callable[[str], Config], engine_factory: Callable[[Config], Engine]
) -> None:
    engine.add_many([MemoryInput(text) for text in TURNS], user_id="ana")
    with engine_factory(another_store("one-at-a-time")) as single:
        for text in TURNS:
            single.add_many([MemoryInput(text)], user_id="ana")
        expected = stored(single, "ana")
    batch = stored(engine, "ana")
    assert batch == expected
    links, entities, events = batch
    assert sum("melanie" in names for names in links.values()) >= 3  # one entity, linked from each mention
    assert "dr. smith" in links[TURNS[2]]  # "Dr Smith" is the entity the batch made for "Dr. Smith" before it
    assert entities < sum(map(len, links.values()))
    assert all(kinds == ["ADD"] for kinds in events.values())


def test_a_batch_links_to_the_entities_stored_before_it(engine: Engine) -> None:
    engine.add_many([MemoryInput(TURNS[1])], user_id="ana")
    first_links, before, _ = stored(engine, "ana")
    engine.add_many([MemoryInput(TURNS[4]), MemoryInput(TURNS[5])], user_id="ana")
    links, entities, _ = stored(engine, "ana")
    known = set(first_links[TURNS[1]])
    assert {"caroline", "dr. smith", "melanie"} <= known
    assert known & set(links[TURNS[4]]) and known & set(links[TURNS[5]])
    assert entities == before + len((set(links[TURNS[4]]) | set(links[TURNS[5]])) - known)  # no name made twice
