"""LoCoMo conversations as benchmark input, in two shapes: one scope per sample, and
one memory per dialog turn ("turns") or per observation ("facts").

Reads the original ``locomo10.json`` layout (``../shared/bench/locomo-dev.json`` keeps
five of its samples). Follows the data README:

* turns: the memory text is ``"<speaker>: <text>"`` plus ``" [shares <blip_caption>]"``
  for image turns; its key is its ``dia_id``;
* facts: each fact of the sample's ``observation`` (per session and speaker, a list of
  ``[fact, evidence]``) is one memory, in the file's order; a question's relevant facts
  are those drawn from its evidence turns, and questions left with none are skipped;
* questions of category 5 (adversarial) are left out, and malformed evidence ids are
  split, normalised and checked against the conversation.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

DEFAULT_PATH = Path(__file__).resolve().parents[2] / "shared" / "bench" / "locomo-dev.json"
CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop"}
"""Categories scored for retrieval; 5 (adversarial) points at false premises."""

_SESSION = re.compile(r"session_(\d+)")
_EVIDENCE = re.compile(r"D\s*:?\s*(\d+)\s*:\s*(\d+)")


SHAPES = ("turns", "facts")
"""How a conversation becomes memories: one per dialog turn, or one per observation."""


@dataclass(frozen=True)
class Memory:
    """One stored memory: its key in the sample (a turn's ``dia_id``, or a fact's
    ``F<n>``), its text, and the date of its session."""

    key: str
    text: str
    session_date: str


@dataclass(frozen=True)
class Question:
    """A retrieval query and the keys of the memories that answer it."""

    text: str
    category: int
    evidence: tuple[str, ...]


@dataclass(frozen=True)
class Sample:
    """One conversation: its id (the benchmark's user_id), memories and scored questions."""

    sample_id: str
    memories: tuple[Memory, ...]
    questions: tuple[Question, ...]
    skipped_questions: int


def memory_text(turn: dict) -> str:
    """The stored text of a turn, image caption included."""
    text = f"{turn['speaker']}: {turn['text']}"
    if turn.get("blip_caption"):
        text += f" [shares {turn['blip_caption']}]"
    return text


def normalize_evidence(raw: list[str], known: set[str]) -> tuple[str, ...]:
    """Canonical ``D<session>:<turn>`` ids from raw evidence strings, known turns only.

    Handles the malformed forms in the data: ``"D8:6; D9:17"`` (two ids in one string),
    ``"D:11:26"`` (stray colon), ``"D30:05"`` (leading zero); ``"D"`` and ids that name
    no turn of the conversation are dropped. Order kept, duplicates removed.
    """
    ids: list[str] = []
    for item in raw:
        for session, turn in _EVIDENCE.findall(str(item)):
            dia_id = f"D{int(session)}:{int(turn)}"
            if dia_id in known and dia_id not in ids:
                ids.append(dia_id)
    return tuple(ids)


def sessions(mapping: dict, suffix: str = "") -> list[tuple[int, str]]:
    """``(number, key)`` of every ``session_N<suffix>`` key, in session order."""
    pattern = re.compile(_SESSION.pattern + re.escape(suffix))
    return sorted((int(match.group(1)), key) for key in mapping if (match := pattern.fullmatch(key)))


def parse_sample(sample: dict, categories: set[int] | None = None, shape: str = "turns") -> Sample:
    """The sample's memories in session order and the questions of ``categories`` (default
    1–4) that keep evidence among them."""
    categories = set(CATEGORIES) if categories is None else categories
    conversation = sample["conversation"]
    turns = []
    for number, key in sessions(conversation):
        date = conversation.get(f"session_{number}_date_time", "")
        turns.extend(Memory(turn["dia_id"], memory_text(turn), date) for turn in conversation[key])
    known = {turn.key for turn in turns}
    memories, keys_of = (turns, None) if shape == "turns" else facts(sample, known)
    questions, skipped = [], 0
    for qa in sample["qa"]:
        if qa.get("category") not in categories:
            continue
        evidence = normalize_evidence(qa.get("evidence", []), known)
        if keys_of is not None:
            evidence = tuple(dict.fromkeys(key for dia_id in evidence for key in keys_of.get(dia_id, ())))
        if not evidence:
            skipped += 1
            continue
        questions.append(Question(qa["question"], qa["category"], evidence))
    return Sample(sample["sample_id"], tuple(memories), tuple(questions), skipped)


def facts(sample: dict, known: set[str]) -> tuple[list[Memory], dict[str, list[str]]]:
    """The sample's observations as memories (session by session, speaker by speaker, in the
    file's order), and for each turn the keys of the facts drawn from it."""
    conversation, observations = sample["conversation"], sample.get("observation", {})
    memories: list[Memory] = []
    keys_of: dict[str, list[str]] = {}
    for number, key in sessions(observations, "_observation"):
        date = conversation.get(f"session_{number}_date_time", "")
        for listed in observations[key].values():
            for fact, evidence in listed:
                memory = Memory(f"F{len(memories) + 1}", fact, date)
                memories.append(memory)
                raw = evidence if isinstance(evidence, list) else [evidence]
                for dia_id in normalize_evidence(raw, known):
                    keys_of.setdefault(dia_id, []).append(memory.key)
    return memories, keys_of


def load(path: Path = DEFAULT_PATH, categories: set[int] | None = None, shape: str = "turns") -> list[Sample]:
    """Every sample of a LoCoMo-format file, as ``shape`` memories."""
    with Path(path).open(encoding="utf-8") as handle:
        return [parse_sample(sample, categories, shape) for sample in json.load(handle)]


def head(sample: Sample, max_turns: int | None = None, max_questions: int | None = None) -> Sample:
    """A slice of a sample: its first ``max_turns`` memories, and the first questions still answerable in them
    (evidence outside the slice is dropped, questions left without evidence are skipped)."""
    memories = sample.memories[:max_turns] if max_turns else sample.memories
    known = {memory.key for memory in memories}
    questions = []
    for question in sample.questions:
        evidence = tuple(key for key in question.evidence if key in known)
        if evidence:
            questions.append(Question(question.text, question.category, evidence))
    kept = questions[:max_questions] if max_questions else questions
    return Sample(sample.sample_id, memories, tuple(kept), sample.skipped_questions)
