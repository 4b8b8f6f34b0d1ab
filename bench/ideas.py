"""Ranking ideas measured by rescoring: every question's signals read once, every idea ranks them.

    python -m bench ideas [--shape turns|facts] [--data FILE] [--db FILE] [--no-doc]

``bench/quality.py`` measures each configuration the engine ships by asking the engine;
this script measures ideas the engine does not have, fast enough to try many. It builds
(or reuses) the quality benchmark's database, then reads, for every question and through
the engine's own ``store.ranking.retrieval`` functions and snapshot reads, the semantic similarity
of every memory of its scope, the raw BM25 of every keyword hit, and the stored entities
each query entity matches. Each idea is a small change to how those signals become the
three inputs of ``store.ranking.scoring.fuse``, which ranks them as the engine does.

``default`` is the hand-set fusion (``ranking = "trimem"``, whose first candidates the default
ranking reorders) rescored this way: every memory of the scope is a candidate, which the union
pool nearly always reaches. On a slice that fits in one over-fetch it ranks exactly as
``Engine.search`` with that ranking (``tests/test_bench_smoke.py``); on the dev set it is within
0.001 recall@10 of ``bench/quality.py``'s row for it.

Each idea is judged by the rule the shipped departures passed: recall@10 on the "tune"
conversations rises and no tune category falls by more than 0.01; the "check"
conversations (``quality.CHECK_SAMPLES``) show whether a gain holds. An idea that meets
the rule still has to be built into the engine and measured by ``bench/quality.py``.
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import apsw
import numpy as np

from bench import locomo, metrics, quality, report, sqlite_file
from store import Engine, backend, load_config
from store.analysis.embeddings import open_embedder
from store.analysis.nlp import NLP
from store.analysis.terms import plain_terms
from store.backend import Snapshot
from store.ranking import learned, retrieval, scoring
from store.scope import Scope as StoreScope
from store.sqlite.sql import DIALECT
from store.sqlite.statements import SQLiteSnapshot
from store.validation import check_scope

SHIPPED = load_config(environ={}).search
CONTEXT, REACH, QUESTION_SHARE = SHIPPED.keyword_context, SHIPPED.keyword_context_reach, SHIPPED.question_keywords
"""The shipped keyword-context weight and reach and question share; the rest of the default (closest
entity match, rarity, the score share) is written out below, and the smoke test compares it
with ``Engine.search``."""
FRAMING_NOUNS = frozenset({"kind", "type", "way", "sort"})
"""Nouns that frame a question ("what kind of …") rather than name its subject."""
_CAPTION = re.compile(r"\s*\[shares [^\]]*\]$")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


# --- what is read once --------------------------------------------------------------------


@dataclass(frozen=True)
class Scope:
    """One conversation's memories: texts and BM25 terms by rowid, entity links by entity."""

    texts: dict[int, str]
    lemmas: dict[int, str]
    links: dict[int, tuple[int, ...]]
    dated: frozenset[int]
    """The memories in which spaCy's NER finds a date or a time ("yesterday", "last May")."""
    questions: frozenset[int]
    """The memories the engine takes for questions (``Snapshot.questions_among``)."""
    vectors: dict[int, np.ndarray]
    """Each memory's stored embedding."""

    @property
    def size(self) -> int:
        return len(self.texts)

    def neighbours(self, rowids: Sequence[int], reach: int = 1) -> dict[int, list[tuple[int, int]]]:
        """The memories up to ``reach`` places before and after each rowid in the scope, with how
        many places away each is: ``Snapshot.adjacent_memories``' rule over the scope's keys,
        with no limit in time (the benchmark stores each scope in one sitting)."""
        return retrieval.places_away(backend.neighbours(rowids, self.texts, 0, reach))


@dataclass(frozen=True)
class Asked:
    """One question with its signals over its whole scope."""

    sample_id: str
    category: int
    text: str
    relevant: frozenset[int]
    terms: tuple[str, ...]
    similarity: dict[int, float]
    """Every memory of the scope, most similar first (``fuse`` breaks ties in this order)."""
    bm25: dict[int, float]
    entities: tuple[tuple[tuple[int, float], ...], ...]
    """For each query entity, the stored entities at least ``ENTITY_MATCH_THRESHOLD`` similar, closest first."""
    entity_names: dict[int, str]
    """The text of every stored entity in ``entities``."""
    terms_similarity: dict[int, float]
    """As ``similarity``, for the embedding of the query's BM25 terms instead of the question."""
    embedding: np.ndarray
    """The question's own embedding."""
    names: frozenset[str]
    """The names it asks about (``retrieval.PreparedQuery.names``)."""


class Keywords:
    """BM25 over the benchmark database for other query terms, and over a second index of
    lemmas plus surface words (built in memory from every stored memory, so its IDF is the
    real index's)."""

    def __init__(self, engine: Engine, nlp: NLP) -> None:
        self._backend = engine.backend
        self._stop_words = nlp._stop_words  # the loaded pipeline's, as for the real index's terms
        self._surface = apsw.Connection(":memory:")
        self._surface.execute("CREATE VIRTUAL TABLE surface USING fts5(terms)")
        with self._surface, sqlite_file.reading(engine.backend.path) as view:
            for rowid, text, lemmas in view.conn.execute("SELECT rowid, text, text_lemmatized FROM memories"):
                self._surface.execute(
                    "INSERT INTO surface(rowid, terms) VALUES (?, ?)",
                    (rowid, with_surface(lemmas.split(), text, self._stop_words)),
                )

    def bm25(self, terms: Sequence[str], sample_id: str) -> dict[int, float]:
        scope = check_scope(sample_id, None, None)
        with self._backend.snapshot() as view:
            return dict(view.bm25_memories(terms, scope, 1_000_000, None, None))

    def surface_bm25(self, question: Asked, scope: Scope) -> dict[int, float]:
        terms = with_surface(list(question.terms), question.text, self._stop_words).split()
        hits = self._surface.execute(
            "SELECT rowid, -bm25(surface) FROM surface WHERE surface MATCH ?", (fts_match_expression(terms),)
        )
        return {rowid: score for rowid, score in hits if rowid in scope.texts}


def fts_match_expression(terms: Sequence[str]) -> str:
    """An FTS5 query that ORs the terms, each as a quoted string.

    User text is never FTS5 syntax: quoting (with inner quotes doubled) turns
    ``NEAR(``, ``AND``, ``*``, ``-`` and ``:`` into plain tokens.
    """
    return " OR ".join('"' + term.replace('"', '""') + '"' for term in terms)


def with_surface(lemmas: list[str], text: str, stop_words: frozenset[str]) -> str:
    """BM25 terms plus the text's lower-cased words that are not among them."""
    return " ".join([*lemmas, *(word for word in plain_terms(text, stop_words) if word not in lemmas)])


def read_scope(view: SQLiteSnapshot, sample_id: str, nlp: NLP) -> Scope:
    """The conversation's memories with their lemmas and entity links, read by SQL (the
    snapshot offers neither)."""
    filed = check_scope(sample_id, None, None)
    where, params = DIALECT.scope_sql(filed, "m")
    texts, lemmas = {}, {}
    for rowid, text, lemmatized in view.conn.execute(
        f"SELECT m.rowid, m.text, m.text_lemmatized FROM memories m WHERE {where} ORDER BY m.rowid", params
    ):
        texts[rowid], lemmas[rowid] = text, lemmatized
    links: dict[int, list[int]] = {}
    for entity_id, rowid in view.conn.execute(
        f"SELECT l.entity_id, l.memory_rowid FROM memory_entities l JOIN memories m ON m.rowid = l.memory_rowid "
        f"WHERE {where}",
        params,
    ):
        links.setdefault(entity_id, []).append(rowid)
    docs = nlp._pipeline().pipe(texts.values(), batch_size=64)
    dated = frozenset(rowid for rowid, doc in zip(texts, docs) if any(e.label_ in ("DATE", "TIME") for e in doc.ents))
    questions = frozenset(view.questions_among(list(texts), filed))
    vectors = {
        rowid: np.frombuffer(blob, dtype=np.float32)
        for rowid, blob in view.conn.execute(
            "SELECT memory_rowid, embedding FROM memory_vectors WHERE user_id = ?", (sample_id,)
        )
    }
    links_by_entity = {entity_id: tuple(rowids) for entity_id, rowids in links.items()}
    return Scope(texts, lemmas, links_by_entity, dated, questions, vectors)


def similarities(view: Snapshot, vector: np.ndarray, rowids: Sequence[int], scope: StoreScope) -> dict[int, float]:
    """Each memory's similarity to ``vector`` (memories within ``scope``), most similar first."""
    distances = sorted(view.distances_for(vector, rowids, scope), key=lambda item: (item[1], item[0]))
    return {rowid: scoring.similarity_from_distance(distance) for rowid, distance in distances}


def read_questions(
    engine: Engine, samples: Sequence[locomo.Sample], mapping: dict[str, dict[str, str]]
) -> tuple[dict[str, Scope], list[Asked]]:
    """Every question's signals over its whole scope, computed by the engine's own functions."""
    options = engine.config.search
    scopes, asked = {}, []
    with sqlite_file.reading(engine.backend.path) as view:
        for sample in samples:
            scope = read_scope(view, sample.sample_id, engine.nlp)
            scopes[sample.sample_id] = scope
            rowids = list(scope.texts)
            where = check_scope(sample.sample_id, None, None)
            rowid_of = {row.id: rowid for rowid, row in view.memories_by_rowid(rowids, where).items()}
            for question in sample.questions:
                prepared = retrieval.prepare(
                    question.text, engine.nlp, engine.embedder, engine._names, options, engine._side
                )
                entities, entity_names = matched_entities(view, prepared, where)
                asked.append(
                    Asked(
                        sample_id=sample.sample_id,
                        category=question.category,
                        text=question.text,
                        relevant=frozenset(rowid_of[mapping[sample.sample_id][dia]] for dia in question.evidence),
                        terms=tuple(prepared.terms),
                        similarity=similarities(view, prepared.embedding, rowids, where),
                        bm25=dict(view.bm25_memories(prepared.terms, where, len(rowids), None, None)),
                        entities=entities,
                        entity_names=entity_names,
                        terms_similarity=similarities(
                            view, engine.embedder.embed_batch([" ".join(prepared.terms)])[0], rowids, where
                        ),
                        embedding=prepared.embedding,
                        names=prepared.names,
                    )
                )
    return scopes, asked


def matched_entities(
    view: Snapshot, prepared: retrieval.PreparedQuery, where: StoreScope
) -> tuple[tuple[tuple[tuple[int, float], ...], ...], dict[int, str]]:
    """``Asked.entities`` and ``Asked.entity_names``, by the engine's entity KNN within the
    conversation's scope."""
    entities, names = [], {}
    for hits in view.knn_entities(prepared.entity_embeddings, where, scoring.ENTITY_SEARCH_LIMIT,
                                  scoring.ENTITY_MATCH_DISTANCE):
        matched = []
        for entity_id, text, distance in hits:
            similarity = scoring.similarity_from_distance(distance)
            if similarity >= scoring.ENTITY_MATCH_THRESHOLD:
                matched.append((entity_id, similarity))
                names[entity_id] = text
        entities.append(tuple(sorted(matched, key=lambda m: -m[1])))
    return tuple(entities), names


# --- from signals to a ranking --------------------------------------------------------------


class Signals(NamedTuple):
    """The inputs of ``scoring.fuse``."""

    similarity: dict[int, float]
    bm25_raw: dict[int, float]
    boosts: dict[int, float]
    params: scoring.SigmoidParams
    entity_active: bool


def entity_boosts(
    question: Asked, scope: Scope, threshold: float = scoring.ENTITY_MATCH_THRESHOLD, summed: bool = False,
    names: bool = True,
) -> tuple[dict[int, float], bool]:
    """The default's boosts: each query entity through its closest stored entity and the longer
    names holding it (without ``names``, the closest alone), as one entity weighted by the
    rarity of all their memories; a memory keeps the largest (or, ``summed``, the sum capped at
    the boost weight)."""
    boosts: dict[int, float] = {}
    active = False
    for matches in question.entities:
        matches = tuple(m for m in matches if m[1] >= threshold)
        if not matches:
            continue
        entity_id, similarity = matches[0]
        similar = {other: (question.entity_names[other], s) for other, s in matches}
        family = (entity_id, *(retrieval.longer_names(similar, question.entity_names[entity_id]) if names else ()))
        links = [rowid for member in family for rowid in scope.links.get(member, ())]
        active = active or bool(links)
        boost = scoring.entity_boost(similarity, len(links), scoring.entity_rarity(len(links), scope.size))
        for rowid in links:
            if summed:
                boosts[rowid] = min(boosts.get(rowid, 0.0) + boost, scoring.ENTITY_BOOST_WEIGHT)
            elif boost > boosts.get(rowid, 0.0):
                boosts[rowid] = boost
    return boosts, active


def default_signals(
    question: Asked,
    scope: Scope,
    *,
    bm25: dict[int, float] | None = None,
    term_count: int | None = None,
    questions: frozenset[int] | None = None,
    question_share: float = QUESTION_SHARE,
    weight: float = CONTEXT,
    reach: int = REACH,
) -> Signals:
    """The shipped ranking's signals (``configs/default.toml``), with other keyword hits, other
    memories taken for questions, or another keyword-context weight or reach, if given."""
    params = scoring.bm25_params(len(question.terms) if term_count is None else term_count)
    raw = question.bm25 if bm25 is None else bm25
    boosts, active = entity_boosts(question, scope)
    asking = scope.questions if questions is None else questions
    context = scoring.keyword_context(raw, scope.neighbours(list(raw), reach), weight, params, asking, question_share)
    return Signals(question.similarity, context.raw, boosts, params, active)


def rank(signals: Signals, threshold: float) -> list[int]:
    fused = scoring.fuse(
        signals.similarity,
        signals.bm25_raw,
        signals.params,
        signals.boosts,
        threshold,
        quality.TOP_K,
        entity_active=signals.entity_active,
    )
    return [rowid for rowid, _ in fused.ranked]


# --- the ideas --------------------------------------------------------------------------------

Rescore = Callable[[Asked, Scope, Keywords], Signals]


@dataclass(frozen=True)
class Idea:
    name: str
    what: str
    signals: Rescore


def ends_asking(text: str) -> bool:
    """A turn that ends with a question once the image caption LoCoMo appends is left out."""
    return _CAPTION.sub("", text).rstrip().endswith("?")


def only_asks(text: str) -> bool:
    """A turn whose every sentence is a question: it states nothing."""
    said = _CAPTION.sub("", text).split(":", 1)[-1].strip()
    sentences = [sentence for sentence in _SENTENCE_END.split(said) if sentence]
    return bool(sentences) and all(sentence.endswith("?") for sentence in sentences)


def speaker(text: str) -> str:
    """The speaker label of a LoCoMo turn ("Caroline: …"), lower-cased."""
    return text.split(":", 1)[0].strip().lower()


def context_weight(weight: float) -> Rescore:
    def signals(q: Asked, s: Scope, _: Keywords) -> Signals:
        return default_signals(q, s, weight=weight)

    return signals


def context_reach(reach: int) -> Rescore:
    def signals(q: Asked, s: Scope, _: Keywords) -> Signals:
        return default_signals(q, s, reach=reach)

    return signals


def without_terms(drop: Callable[[str, Asked, Scope], bool], recount: bool = True) -> Rescore:
    """The default with some query terms left out of the keyword query (and, ``recount``,
    of the sigmoid's term count too)."""

    def signals(q: Asked, s: Scope, keywords: Keywords) -> Signals:
        kept = [term for term in q.terms if not drop(term, q, s)]
        if not recount:
            return default_signals(q, s, term_count=len(kept))
        return default_signals(q, s, bm25=keywords.bm25(kept, q.sample_id), term_count=len(kept))

    return signals


def in_most_of_scope(term: str, q: Asked, s: Scope) -> bool:
    return sum(term in lemmas.split() for lemmas in s.lemmas.values()) > s.size / 2


def questions_by(is_question: Callable[[str], bool] | None, share: float = QUESTION_SHARE) -> Rescore:
    """The default with the memories ``is_question`` accepts taken for questions (``None``:
    the engine's), each keeping ``share`` of its own keyword score."""

    def signals(q: Asked, s: Scope, _: Keywords) -> Signals:
        asking = None if is_question is None else frozenset(r for r, text in s.texts.items() if is_question(text))
        return default_signals(q, s, questions=asking, question_share=share)

    return signals


def question_passes_all(q: Asked, s: Scope, _: Keywords) -> Signals:
    """A hit that is a question passes its whole keyword score to the memory after it."""
    base = default_signals(q, s)
    context = dict(base.bm25_raw)
    for rowid, raw in q.bm25.items():
        if rowid in s.questions and rowid + 1 in s.texts:
            context[rowid + 1] = max(context.get(rowid + 1, 0.0), raw)
    return base._replace(bm25_raw=context)


def entity_context(q: Asked, s: Scope, _: Keywords) -> Signals:
    """A memory beside an entity-linked one earns half its boost."""
    base = default_signals(q, s)
    boosts = dict(base.boosts)
    for rowid, boost in base.boosts.items():
        for n, _ in s.neighbours([rowid])[rowid]:
            boosts[n] = max(boosts.get(n, 0.0), boost / 2)
    return base._replace(boosts=boosts)


def entity_variant(
    threshold: float = scoring.ENTITY_MATCH_THRESHOLD, summed: bool = False, names: bool = True
) -> Rescore:
    def signals(q: Asked, s: Scope, _: Keywords) -> Signals:
        boosts, active = entity_boosts(q, s, threshold, summed, names)
        return default_signals(q, s)._replace(boosts=boosts, entity_active=active)

    return signals


def speaker_named(q: Asked, s: Scope, _: Keywords) -> Signals:
    """A turn whose speaker the query names gets a boost of 0.1 (with ``actor_id`` set, the
    engine could read the speaker from the memory instead of its text)."""
    base = default_signals(q, s)
    named = set(q.terms)
    boosts = dict(base.boosts)
    for rowid, text in s.texts.items():
        if speaker(text) in named:
            boosts[rowid] = max(boosts.get(rowid, 0.0), 0.1)
    return base._replace(boosts=boosts, entity_active=base.entity_active or bool(boosts))


def semantic_context(q: Asked, s: Scope, _: Keywords) -> Signals:
    """A memory's similarity is at least the mean of its own and its closer neighbour's."""
    base = default_signals(q, s)
    similarity = {}
    for rowid, own in q.similarity.items():
        around = [q.similarity[n] for n, _ in s.neighbours([rowid])[rowid]]
        similarity[rowid] = max(own, (own + max(around)) / 2) if around else own
    return base._replace(similarity=similarity)


def surface_forms(q: Asked, s: Scope, keywords: Keywords) -> Signals:
    return default_signals(q, s, bm25=keywords.surface_bm25(q, s))


def distinct_term_count(q: Asked, s: Scope, _: Keywords) -> Signals:
    """The sigmoid's term count without the "-ing" copies Mem0's rule adds ("meeting meet")."""
    doubled = sum(1 for a, b in zip(q.terms, q.terms[1:]) if b.endswith("ing") and b != a and b.startswith(a[:3]))
    return default_signals(q, s, term_count=len(q.terms) - doubled)


def time_answer(q: Asked, s: Scope, _: Keywords) -> Signals:
    """A question asking when boosts the memories that mention a time, as an entity the
    question names (similarity 1) linked to each of them, rarity included."""
    base = default_signals(q, s)
    if not learned.ASKS_WHEN.match(q.text) or not s.dated:
        return base
    boost = scoring.entity_boost(1.0, len(s.dated), scoring.entity_rarity(len(s.dated), s.size))
    boosts = dict(base.boosts)
    for rowid in s.dated:
        boosts[rowid] = max(boosts.get(rowid, 0.0), boost)
    return base._replace(boosts=boosts, entity_active=True)


def second_hop(seeds: int = 3, share: float = 0.5) -> Rescore:
    """A second hop over the entity links, from the default's first ``seeds`` hits: each memory
    linked to an entity of theirs that the query did not match earns ``share`` of the boost that
    entity would give as a query entity (similarity 1, rarity included), so evidence that shares
    no word with the question can rise beside the hit that names its subject."""

    def signals(q: Asked, s: Scope, _: Keywords) -> Signals:
        base = default_signals(q, s)
        first = set(rank(base, SHIPPED.threshold)[:seeds])
        matched = {entity_id for matches in q.entities for entity_id, _ in matches}
        boosts = dict(base.boosts)
        for entity_id, rowids in s.links.items():
            if entity_id in matched or first.isdisjoint(rowids):
                continue
            boost = share * scoring.entity_boost(1.0, len(rowids), scoring.entity_rarity(len(rowids), s.size))
            for rowid in rowids:
                if rowid not in first:
                    boosts[rowid] = max(boosts.get(rowid, 0.0), boost)
        return base._replace(boosts=boosts, entity_active=base.entity_active or bool(boosts))

    return signals


def pseudo_relevance(seeds: int = 3, weight: float = 0.5) -> Rescore:
    """Pseudo-relevance feedback (Rocchio): the question's embedding plus ``weight`` times the mean
    of the default's first ``seeds`` hits' embeddings, renormalised, gives every similarity."""

    def signals(q: Asked, s: Scope, _: Keywords) -> Signals:
        base = default_signals(q, s)
        first = rank(base, SHIPPED.threshold)[:seeds]
        if not first:
            return base
        expanded = q.embedding + weight * np.mean([s.vectors[rowid] for rowid in first], axis=0)
        expanded /= np.linalg.norm(expanded)
        moved = {rowid: min(max(float(s.vectors[rowid] @ expanded), 0.0), 1.0) for rowid in q.similarity}
        return base._replace(similarity=dict(sorted(moved.items(), key=lambda item: -item[1])))

    return signals


def sigmoid_moved(midpoint: float, steepness: float = 1.0) -> Rescore:
    """The default with the BM25 sigmoid's midpoint moved by ``midpoint`` and its steepness
    scaled by ``steepness``: short memories reach larger raw BM25 sums than Mem0's brackets
    were set for."""

    def signals(q: Asked, s: Scope, _: Keywords) -> Signals:
        base = default_signals(q, s)
        return base._replace(
            params=scoring.SigmoidParams(base.params.midpoint + midpoint, base.params.steepness * steepness)
        )

    return signals


def semantic_weight(weight: float) -> Rescore:
    """Similarity counted ``weight`` times in the fused sum (the gate unchanged)."""

    def signals(q: Asked, s: Scope, _: Keywords) -> Signals:
        base = default_signals(q, s)
        return base._replace(similarity={rowid: weight * value for rowid, value in base.similarity.items()})

    return signals


def terms_embedding(q: Asked, s: Scope, _: Keywords) -> Signals:
    return default_signals(q, s)._replace(similarity=q.terms_similarity)


IDEAS = (
    Idea("default", "the hand-set fusion, rescored", lambda q, s, _: default_signals(q, s)),
    Idea("keyword context 0.75", "a neighbour earns 0.75 of a hit's score, not half", context_weight(0.75)),
    Idea("keyword context two away", "memories two away earn a quarter", context_reach(2)),
    Idea("keyword context three away", "memories two away earn a quarter, three away a sixth", context_reach(3)),
    Idea(
        "names out of the keyword query",
        "terms in more than half the scope (the speakers) dropped",
        without_terms(in_most_of_scope),
    ),
    Idea(
        "names out of the term count",
        "the same terms kept in the query but not counted by the sigmoid",
        without_terms(in_most_of_scope, recount=False),
    ),
    Idea(
        "framing nouns out",
        '"kind", "type", "way", "sort" dropped from the keyword query',
        without_terms(lambda term, q, s: term in FRAMING_NOUNS),
    ),
    Idea("distinct term count", 'the sigmoid counts "participate participating" once', distinct_term_count),
    Idea("surface forms too", "one index of lemmas plus surface words, queried with both", surface_forms),
    Idea(
        "questions keep their whole score",
        "a memory ending with a question keeps all its keyword score (the default before, and Mem0)",
        questions_by(None, share=1.0),
    ),
    Idea(
        "questions: caption aside",
        "a turn counts as a question when it ends asking before LoCoMo's appended image caption",
        questions_by(ends_asking),
    ),
    Idea("questions: asks only", "only turns that state nothing (every sentence asks) count", questions_by(only_asks)),
    Idea(
        "question passes all",
        "a turn that ends asking passes its whole keyword score to the next turn",
        question_passes_all,
    ),
    Idea("entity context", "a memory beside an entity-linked one earns half its boost", entity_context),
    Idea("entity threshold 0.7", "a query entity's closest match must be 0.7 similar, not 0.5", entity_variant(0.7)),
    Idea(
        "entity boosts summed",
        "a memory's boosts from several query entities add up (capped at 0.5)",
        entity_variant(summed=True),
    ),
    Idea(
        "closest entity only",
        "a query entity boosts through its closest stored entity alone, not the longer names holding it",
        entity_variant(names=False),
    ),
    Idea("speaker named", "a turn whose speaker the query names earns a boost of 0.1", speaker_named),
    Idea("semantic context", "similarity at least the mean of a memory's and its closer neighbour's", semantic_context),
    Idea(
        "a when-question wants a time",
        "a question asking when boosts the memories that mention a date or time, as a rare entity would",
        time_answer,
    ),
    Idea("keyword-terms embedding", "the query's BM25 terms embedded instead of the question", terms_embedding),
    Idea(
        "second hop from the first 3",
        "memories sharing an entity the query did not name with the first 3 hits earn half its boost",
        second_hop(3, 0.5),
    ),
    Idea("second hop from the first 5", "the same from the first 5 hits, a quarter of the boost", second_hop(5, 0.25)),
    Idea(
        "pseudo-relevance feedback",
        "similarity to the question's embedding plus half the mean of the first 3 hits' (Rocchio)",
        pseudo_relevance(3, 0.5),
    ),
    Idea("pseudo-relevance, lighter", "the same with a quarter of the first 3 hits' mean", pseudo_relevance(3, 0.25)),
    Idea("sigmoid midpoint -2", "the BM25 sigmoid's midpoint 2 lower", sigmoid_moved(-2.0)),
    Idea("sigmoid midpoint +2", "the BM25 sigmoid's midpoint 2 higher", sigmoid_moved(2.0)),
    Idea("sigmoid half as steep", "the BM25 sigmoid's steepness halved", sigmoid_moved(0.0, 0.5)),
    Idea("semantic weight 1.5", "similarity counts 1.5 times in the fused sum", semantic_weight(1.5)),
    Idea("semantic weight 0.75", "similarity counts 0.75 times in the fused sum", semantic_weight(0.75)),
)


# --- measuring ---------------------------------------------------------------------------------


@dataclass
class Outcome:
    idea: Idea
    scores: list[dict[str, float]]

    def mean(self, asked: Sequence[Asked], keep: Callable[[Asked], bool] = lambda q: True) -> dict[str, float]:
        return metrics.mean(score for score, q in zip(self.scores, asked) if keep(q))


def measure(
    idea: Idea, scopes: dict[str, Scope], asked: Sequence[Asked], keywords: Keywords, threshold: float
) -> Outcome:
    scores = []
    for q in asked:
        ranked = rank(idea.signals(q, scopes[q.sample_id], keywords), threshold)
        scores.append(metrics.score([str(r) for r in ranked], {str(r) for r in q.relevant}))
    return Outcome(idea, scores)


def tuned(q: Asked) -> bool:
    return q.sample_id not in quality.CHECK_SAMPLES


def checked(q: Asked) -> bool:
    return not tuned(q)


def verdict(outcome: Outcome, default: Outcome, asked: Sequence[Asked]) -> tuple[float, str, float, float, str]:
    """(tune recall@10 change, worst tune category, its change, check recall@10 change, what the rule says)."""
    gain = outcome.mean(asked, tuned)["recall@10"] - default.mean(asked, tuned)["recall@10"]
    changes = {
        locomo.CATEGORIES[c]: outcome.mean(asked, lambda q, c=c: tuned(q) and q.category == c)["recall@10"]
        - default.mean(asked, lambda q, c=c: tuned(q) and q.category == c)["recall@10"]
        for c in sorted({q.category for q in asked})
    }
    worst = min(changes, key=changes.get)
    check_gain = outcome.mean(asked, checked)["recall@10"] - default.mean(asked, checked)["recall@10"]
    if gain <= 0 or changes[worst] < -0.01:
        rule = "dropped"
    elif check_gain < -1e-9:
        rule = "meets it; check falls"
    else:
        rule = "meets it" if check_gain > 1e-9 else "meets it; check unchanged"
    return gain, worst, changes[worst], check_gain, rule


def markdown(outcomes: Sequence[Outcome], asked: Sequence[Asked], shape: str, command: str, environment: str) -> str:
    default = outcomes[0]
    rows = []
    for outcome in outcomes:
        everything, tune = outcome.mean(asked), outcome.mean(asked, tuned)
        check = outcome.mean(asked, checked)
        gain, worst, change, check_gain, rule = verdict(outcome, default, asked)
        first = outcome is default
        rows.append(
            [
                outcome.idea.name,
                outcome.idea.what,
                everything["recall@10"],
                everything["ndcg@10"],
                everything["mrr"],
                tune["recall@10"] if first else f"{gain:+.3f}",
                "" if first else f"{worst} {change:+.3f}",
                check["recall@10"] if first else f"{check_gain:+.3f}",
                "" if first else rule,
            ]
        )
    headers = [
        "idea",
        "what changes",
        "recall@10",
        "ndcg@10",
        "mrr",
        "tune recall@10",
        "worst tune category",
        "check recall@10",
        "rule",
    ]
    tuned_count = sum(map(tuned, asked))
    return (
        f"## Ranking ideas, rescored (LoCoMo dev, {quality.SHAPE_TITLES[shape]})\n\n"
        f"`{command}`\n\n{environment}\n\n"
        f"{len(asked)} questions; tune = the {tuned_count} of the conversations settings were chosen on, "
        f"check = the {len(asked) - tuned_count} of {', '.join(quality.CHECK_SAMPLES)}. The first row is the "
        "default rescored over whole scopes; the others give their change from it. The rule: tune "
        "recall@10 up and no tune category down by more than 0.01. Costs are not measured here: an idea "
        "that meets the rule is built into the engine and timed there.\n\n" + report.table(headers, rows, "llrrrrlrl")
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", type=Path, default=locomo.DEFAULT_PATH, help="a LoCoMo-format JSON file")
    parser.add_argument(
        "--db", type=Path, default=report.RESULTS / "locomo.db", help="benchmark database file (built when missing)"
    )
    parser.add_argument("--shape", choices=locomo.SHAPES, default="turns", help="memories as turns or as facts")
    parser.add_argument("--ideas", default="", help="comma-separated idea names (default: all)")
    parser.add_argument("--no-doc", action="store_true", help="do not rewrite docs/benchmarks.md")
    args = parser.parse_args(argv)

    base = load_config(environ={}).using(str(quality.database_path(args.db, args.shape)))
    embedder = open_embedder(
        base.store.embedding_model, base.store.embedding_backend, cache_dir=base.model_cache_dir, threads=1
    )
    nlp = NLP()
    embedder.load()
    nlp.load()
    samples = locomo.load(args.data, shape=args.shape)
    ideas = IDEAS if not args.ideas else (IDEAS[0], *(i for i in IDEAS[1:] if i.name in args.ideas.split(",")))
    started = time.perf_counter()
    with Engine(base, embedder=embedder, nlp=nlp) as engine:
        mapping = quality.ingest(engine, samples)
        scopes, asked = read_questions(engine, samples, mapping)
        keywords = Keywords(engine, nlp)
        threshold = engine.config.search.threshold
        print(f"signals of {len(asked)} questions read in {time.perf_counter() - started:.0f} s", file=sys.stderr)
        outcomes = []
        for idea in ideas:
            outcomes.append(measure(idea, scopes, asked, keywords, threshold))
            overall = outcomes[-1].mean(asked)
            print(
                f"  {idea.name:<32} recall@10 {overall['recall@10']:.3f}  ndcg@10 {overall['ndcg@10']:.3f}",
                file=sys.stderr,
            )
    environment = report.environment({"spaCy pipeline": nlp.tier, "embedding backend": embedder.backend})
    section = markdown(outcomes, asked, args.shape, report.command_line(), environment)
    print(section)
    if not args.no_doc and not args.ideas:
        report.write_section(f"ideas{quality.run_tag(args.shape)}", section)
    return 0
