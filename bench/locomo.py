"""LoCoMo conversations as benchmark input: one scope per sample, one memory per turn.

Reads the original ``locomo10.json`` layout (``../shared/bench/locomo-dev.json`` keeps
five of its samples). Follows the data README: the memory text is
``"<speaker>: <text>"`` plus ``" [shares <blip_caption>]"`` for image turns, the
``dia_id`` and session date travel as metadata, questions of category 5 (adversarial)
are left out, and malformed evidence ids are split, normalised and checked against the
conversation.
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


@dataclass(frozen=True)
class Turn:
    """One dialog turn, stored as one memory."""

    dia_id: str
    text: str
    session_date: str


@dataclass(frozen=True)
class Question:
    """A retrieval query and the turns that answer it."""

    text: str
    category: int
    evidence: tuple[str, ...]


@dataclass(frozen=True)
class Sample:
    """One conversation: its id (the benchmark's user_id), turns and scored questions."""

    sample_id: str
    turns: tuple[Turn, ...]
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


def parse_sample(sample: dict, categories: set[int] | None = None) -> Sample:
    """Turns in session order and the questions of ``categories`` (default 1–4) with evidence."""
    categories = set(CATEGORIES) if categories is None else categories
    conversation = sample["conversation"]
    sessions = sorted(
        (int(match.group(1)), key) for key in conversation if (match := _SESSION.fullmatch(key))
    )
    turns = []
    for number, key in sessions:
        date = conversation.get(f"session_{number}_date_time", "")
        turns.extend(Turn(turn["dia_id"], memory_text(turn), date) for turn in conversation[key])
    known = {turn.dia_id for turn in turns}
    questions, skipped = [], 0
    for qa in sample["qa"]:
        if qa.get("category") not in categories:
            continue
        evidence = normalize_evidence(qa.get("evidence", []), known)
        if not evidence:
            skipped += 1
            continue
        questions.append(Question(qa["question"], qa["category"], evidence))
    return Sample(sample["sample_id"], tuple(turns), tuple(questions), skipped)


def load(path: Path = DEFAULT_PATH, categories: set[int] | None = None) -> list[Sample]:
    """Every sample of a LoCoMo-format file."""
    with Path(path).open(encoding="utf-8") as handle:
        return [parse_sample(sample, categories) for sample in json.load(handle)]


def head(sample: Sample, max_turns: int | None = None, max_questions: int | None = None) -> Sample:
    """A slice of a sample: its first turns, and the first questions still answerable in them
    (evidence outside the slice is dropped, questions left without evidence are skipped)."""
    turns = sample.turns[:max_turns] if max_turns else sample.turns
    known = {turn.dia_id for turn in turns}
    questions = []
    for question in sample.questions:
        evidence = tuple(dia_id for dia_id in question.evidence if dia_id in known)
        if evidence:
            questions.append(Question(question.text, question.category, evidence))
    kept = questions[:max_questions] if max_questions else questions
    return Sample(sample.sample_id, turns, tuple(kept), sample.skipped_questions)
