"""Entities: the names and topics in a text that memories are linked by.

The rules mirror Mem0's extractor (``mem0/utils/entity_extraction.py``), re-implemented
with our own word lists: spaCy NER spans with a "thing you can link to" label,
proper-noun spans, quoted text, dotted technical identifiers, codes and noun-compound
topics, with generic words filtered out, deduplicated by :func:`normalize_entity` and
returned in order of first appearance (:func:`extract`).

The rules read a doc that went through the whole pipeline on the *cased* text: NER
and the proper-noun rule need capitals, the compound rule needs the parser's
dependencies and the lemmatizer's lemmas. On the blank tier (no tagger, parser or
NER) only the rule-based parts apply. Nothing here imports spaCy.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from store.analysis.terms import INTERJECTIONS, Vocabulary

if TYPE_CHECKING:  # pragma: no cover - typing only; keeps spaCy out of import time
    from spacy.tokens import Doc, Span, Token

__all__ = ["MAX_ENTITIES", "Entity", "extract", "normalize_entity"]

#: At most this many entities per text (first by appearance); more would
#: link a pasted document to half the entity table.
MAX_ENTITIES = 100


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


TOPIC = "noun_compound"
"""The entity type of a topic ("support group", "pizza place"): every other type names
someone or something (a person, a place, a product, a quoted title, an identifier)."""


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
    ["thing", "stuff", "way", "time", "experience", "situation", "case", "fact", "matter", "issue", "idea", "thought", "feeling", "place", "area", "part", "kind", "type", "sort", "lot", "bit", "day", "year", "week", "month", "moment", "instance", "example", "technique", "method", "approach", "process", "step", "tool", "result", "outcome", "goal", "task", "item", "topic", "scale", "size", "level", "degree", "amount", "number", "style", "look", "color", "colour", "shape", "form", "piece", "section", "side", "end", "edge", "surface", "point", "people", "person", "someone", "something", "anything", "everything", "one", "lots", "plenty"]
)

# Adjectives that do not make a compound specific ("new project" is not a
# topic, "quantum computing" is).
_NON_SPECIFIC_ADJ = frozenset(
    ["many", "few", "several", "some", "any", "all", "most", "more", "less", "much", "little", "enough", "various", "numerous", "multiple", "countless", "great", "good", "bad", "nice", "terrible", "awful", "awesome", "amazing", "wonderful", "horrible", "excellent", "poor", "best", "worst", "better", "worse", "fine", "okay", "ok", "new", "old", "recent", "past", "future", "current", "previous", "next", "last", "first", "latest", "early", "late", "former", "modern", "ancient", "big", "small", "large", "tiny", "huge", "enormous", "long", "short", "tall", "high", "low", "wide", "narrow", "thick", "thin", "deep", "shallow", "similar", "different", "same", "other", "another", "such", "certain", "important", "main", "major", "minor", "key", "primary", "real", "actual", "true", "whole", "entire", "full", "complete", "total", "basic", "simple", "interesting", "boring", "exciting", "special", "particular", "general", "common", "unique", "rare", "typical", "usual", "normal", "regular", "possible", "likely", "potential", "available", "necessary", "only", "own", "solo", "individual", "team", "group", "joint", "collaborative", "final", "initial", "side", "favorite", "favourite"]
)

# Trailing words that add nothing to a compound ("python work" -> "python").
_GENERIC_ENDINGS = frozenset(
    ["work", "works", "job", "jobs", "task", "tasks", "stuff", "thing", "things", "info", "information", "details", "data", "content", "material", "materials", "activity", "activities", "effort", "efforts", "option", "options", "choice", "choices", "result", "results", "output", "outputs", "item", "items"]
)

# Capitalised single words that are headings or labels, not names.
_GENERIC_CAPS = frozenset(
    ["works", "items", "things", "stuff", "resources", "options", "tips", "ideas", "steps", "ways", "methods", "tools", "features", "benefits", "examples", "details", "notes", "note", "instructions", "guidelines", "recommendations", "suggestions", "overview", "summary", "conclusion", "introduction", "pros", "cons", "advantages", "disadvantages", "todo", "update", "updates", "yes", "no", "hello", "hi", "thanks", "please", "today", "tomorrow", "yesterday", "january", "february", "march", "april", "may", "june", "july", "august", "september", "october", "november", "december", "monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"]
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


def _clean_entity_text(text: str) -> str:
    text = text.strip(_STRIP_CHARS)
    # A speaker label or "Note:" prefix ends the name: "Maria: Yep" is Maria.
    if ": " in text and "://" not in text:
        text = text.split(": ", 1)[0]
    words = text.split()
    while len(words) > 1 and words[0].lower().strip(",!.") in INTERJECTIONS:
        words = words[1:]
    text = " ".join(words)
    text = re.sub(r"^\d+\s*\.\s+", "", text)  # "1. Foo" list numbering
    for suffix in ("'s", "\u2019s"):
        text = text.removesuffix(suffix)
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


def _proper_noun_spans(doc: Doc, has_pos: bool, vocabulary: Vocabulary) -> Iterable[tuple[int, str]]:
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
        span = doc[start:j]
        if any(
            _is_cap(tokens[k])
            and not tokens[k].is_stop
            and (not _is_sentence_start(tokens, k) or (has_pos and tokens[k].pos_ == "PROPN"))
            for k in run
        ) and not (has_pos and _not_a_name(span, vocabulary)):
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


# Parts of speech a one-word name cannot be: the small pipeline's NER tags "Allergic" in
# "Ines Duarte: Allergic to penicillin" ORG, and "Glad" in "Glad you like it" PERSON.
# Nationalities and languages (NORP, LANGUAGE) are adjectives and stay.
_NOT_A_NAME_POS = frozenset({"ADJ", "ADV", "VERB", "AUX", "INTJ", "ADP", "SCONJ", "CCONJ", "DET", "PRON", "PART"})
_ADJECTIVE_LABELS = frozenset({"NORP", "LANGUAGE"})


def _not_a_name(span: Span, vocabulary: Vocabulary) -> bool:
    """A one-word span that the tagger calls an adjective, verb, … and the lemmatizer knows as
    one: a capitalised adjective or sentence opener, not a name. (A name the tagger slips on,
    "Lukas" as a verb, is no word the lemmatizer knows, and stays.)"""
    if len(span) != 1:
        return False
    token = span[0]
    return token.pos_ in _NOT_A_NAME_POS and vocabulary.knows(token.pos_, token.lemma_.lower())


def _ner_spans(doc: Doc, vocabulary: Vocabulary) -> Iterable[tuple[int, str, str]]:
    for ent in doc.ents:
        if ent.label_ not in _NER_LABELS:
            continue
        span: Span = ent
        # "the Eiffel Tower" -> "Eiffel Tower"; keep "The Hague", "The Beatles".
        while len(span) > 1 and span[0].is_stop and span[0].text.islower():
            span = span[1:]
        if ent.label_ not in _ADJECTIVE_LABELS and _not_a_name(span, vocabulary):
            continue
        yield span.start_char, span.text, ent.label_


# Dedup priority: lower wins when the same normalised text has several types.
_TYPE_PRIORITY = {"identifier": 1, "proper_noun": 2, TOPIC: 3, "quoted_text": 4}


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
    return bool(" " not in low and (low in _GENERIC_CAPS or low in _GENERIC_HEADS or low in INTERJECTIONS))


NO_VOCABULARY = Vocabulary()
"""For a pipeline without a lemmatizer: no word is known, so no capitalised word is taken for an adjective."""


def extract(doc: Doc, vocabulary: Vocabulary = NO_VOCABULARY) -> tuple[Entity, ...]:
    """All entity candidates of ``doc``, cleaned, deduplicated and ordered; ``vocabulary``
    (the lemmatizer's) tells a capitalised adjective from a name."""
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

    for start, span_text, label in _ner_spans(doc, vocabulary):
        # The small model mislabels identifiers ("sqlite_vec.load" as
        # WORK_OF_ART); the identifier rule is more precise there.
        if not overlaps_identifier(start, len(span_text)):
            cands.append((start, 0, label, span_text))
    # Spans NER calls a value (DATE "September", TIME, MONEY, ...) are not names.
    value_ranges = [(e.start_char, e.end_char) for e in doc.ents if e.label_ not in _NER_LABELS]

    def is_value(start: int, length: int) -> bool:
        end = start + length
        return any(s <= start and end <= e for s, e in value_ranges)

    for start, span_text in _proper_noun_spans(doc, has_pos, vocabulary):
        if not overlaps_identifier(start, len(span_text)) and not is_value(start, len(span_text)):
            cands.append((start, _TYPE_PRIORITY["proper_noun"], "proper_noun", span_text))
    for start, span_text in _quoted(text):
        cands.append((start, _TYPE_PRIORITY["quoted_text"], "quoted_text", span_text))
    if has_pos and has_dep:
        try:
            for start, span_text in _noun_compounds(doc):
                if not overlaps_identifier(start, len(span_text)):
                    cands.append((start, _TYPE_PRIORITY[TOPIC], TOPIC, span_text))
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
    swallowers = [k for k in keys if best[k][2] != TOPIC]
    kept = [
        k
        for k in keys
        if not any(
            o != k and len(o) > len(k) and patterns[k].search(o)
            for o in (swallowers if best[k][2] != TOPIC else keys)
        )
    ]
    return tuple(Entity(text=best[k][3], normalized=k, entity_type=best[k][2]) for k in kept[:MAX_ENTITIES])


