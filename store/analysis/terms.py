"""BM25 terms: the words of a text as the keyword index and the ``MATCH`` query see them.

Both sides of keyword search use these rules, so that a query term meets the stored
term: memories at write time (``NLP.analyze_batch``) and queries at read time
(``NLP.analyze_query``). The rule mirrors Mem0 (``mem0/utils/lemmatization.py``):

* lower-case (after NFKC), drop punctuation, whitespace and stop words, keep
  alphanumeric lemmas, and *also* keep the original token when it ends in ``-ing``
  and differs from its lemma ("meeting" -> "meeting meet"), because spaCy lemmatises
  the noun and the verb differently and the query may use the other reading;
* a token whose lemma is not alphanumeric ("sqlite_vec.load", "e-mail") is split into
  its alphanumeric pieces rather than dropped;
* a word written with a capital keeps its own form where the lemmatizer would only
  guess ("Ines" -> "ines", never "ine"; "Charles" -> "charles"): spaCy tags such a name
  a plural noun in one sentence and a proper noun in the next, and strips the "s" of an
  unknown plural, so the same name would give two terms (``Vocabulary``);
* runs of CJK / kana / hangul / Thai characters (which the English tokenizer leaves
  as one long token) become single characters plus character bigrams, as current
  Mem0 does, so that a word inside a sentence without spaces can still match.

Every term satisfies ``str.isalnum()``, so the caller can wrap each one in double
quotes for FTS5 without further escaping (no ``"``, ``*``, ``(`` or ``NEAR`` syntax
survives). Pure functions on strings and spaCy tokens; nothing here imports spaCy.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover - typing only; keeps spaCy out of import time
    from spacy.tokens import Doc

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


_WORD_RE = re.compile(r"\w+")

# Words that open chat turns ("Hey Maria", "Thanks John", "Wow"): a capital there says
# nothing about a name (no entity starts with one, and its lemma is kept).
INTERJECTIONS = frozenset(
    ["hey", "hi", "hello", "yeah", "yes", "yep", "yup", "no", "nope", "nah", "thanks", "thank", "wow", "oh", "ooh", "ah", "aw", "aww", "ok", "okay", "well", "sure", "cool", "great", "awesome", "nice", "congrats", "congratulations", "dear", "haha", "lol", "omg", "sorry", "please", "bye", "goodbye", "welcome", "hmm", "um", "uh", "gosh", "wait", "gon", "wan"]
)


@dataclass(frozen=True)
class Vocabulary:
    """The words the lemmatizer knows, by part of speech: its lemma index and its irregular
    forms. A lemma outside them is a guess (spaCy's rules strip an unknown "-s" or "-ed").
    Empty for pipelines without such tables: no lemma counts as a guess."""

    lemmas: Mapping[str, frozenset[str]] = field(default_factory=dict)
    irregular: Mapping[str, frozenset[str]] = field(default_factory=dict)

    def knows(self, pos: str, lemma: str) -> bool:
        """Whether ``lemma`` is a word of this part of speech (tagged ``pos``) the lemmatizer knows."""
        return lemma in self.lemmas.get(pos.lower(), ())

    def guessed(self, pos: str, word: str, lemma: str) -> bool:
        """Whether ``lemma`` of ``word`` (tagged ``pos``) is a rule's guess, not a known word."""
        known = self.lemmas.get(pos.lower())
        return known is not None and lemma not in known and word not in self.irregular.get(pos.lower(), ())


def capitalised_words(text: str) -> frozenset[str]:
    """The words ``text`` writes with a capital, lower-cased as the lemma doc has them, but the
    interjections that open chat turns ("Thanks", "Congrats")."""
    words = (unicodedata.normalize("NFKC", word).lower() for word in _WORD_RE.findall(text) if word[0].isupper())
    return frozenset(word for word in words if word not in INTERJECTIONS)


def lemma_terms(
    doc: Doc, stop_words: frozenset[str], names: frozenset[str] = frozenset(), vocabulary: Vocabulary = Vocabulary()
) -> list[str]:
    """BM25 terms from a doc of lower-cased text (Mem0's rule, see module doc); a word in
    ``names`` (``capitalised_words`` of the original text) whose lemma ``vocabulary`` says is
    a guess stays itself."""
    terms: list[str] = []
    for tok in doc:
        if tok.is_punct or tok.is_space or tok.is_stop:
            continue
        text = tok.lower_
        lemma = unicodedata.normalize("NFKC", tok.lemma_ or tok.lower_).lower()
        if lemma != text and text in names and vocabulary.guessed(tok.pos_, text, lemma):
            lemma = text
        if lemma.isalnum() and not _NGRAM_SCRIPT_RE.search(lemma):
            terms.append(lemma)
        else:
            pieces = alnum_terms(lemma)
            # A piece can be a stop word ("don't" -> "do"): drop those too.
            terms.extend(p for p in pieces if p not in stop_words)
        if text.endswith("ing") and text != lemma and text.isalnum():
            terms.append(text)
    return terms


def plain_terms(text: str, stop_words: frozenset[str]) -> list[str]:
    """Lemma-free terms: lower-cased alphanumeric runs minus stop words.

    For the part of a long text spaCy does not see, and the last resort when the
    pipeline fails on a text.
    """
    return [t for t in alnum_terms(unicodedata.normalize("NFKC", text).lower()) if t not in stop_words]


def alnum_terms(piece: str) -> list[str]:
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

