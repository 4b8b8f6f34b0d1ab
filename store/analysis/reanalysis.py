"""Analysing stored memories again when the analysis rules change.

A memory's keyword terms and entity links are derived from its text by ``store.analysis.nlp``'s
rules, at write time. When a release changes those rules (``ANALYSIS_VERSION``), the
memories written before it would keep terms a query no longer produces: "Ines" stored as
``ine`` would never meet a query's ``ines``. So a store whose recorded version is older is
analysed again: every memory's terms rewritten and its entities relinked, in batches of one
transaction each, the version recorded last. The texts, ids, vectors and history do not change.

Opening a store never does it: that took minutes on a large store, for every command, before
anything was served. A server that can write runs the pass in the background once its models
are warm (``Reanalysis.begin``), and ``trimem doctor --repair`` runs it to the end in the
foreground; meanwhile every read serves what is stored, the memories not yet done with their
older terms and links. Each batch records in the same transaction how far the pass got
(``Snapshot.reanalysis_cursor``), so an interrupted pass resumes there on the next start rather
than starting over. Several servers may run it at once: a batch whose cursor another server moved
meanwhile is dropped, and a memory deleted or edited since it was read keeps what its own write
made. Memories written meanwhile are analysed by the current rules at their write.

The same pass analyses again a memory the language model failed on when it was written: the
write kept the plain rule's terms and no entities rather than fail, and marked it
(``analysis_degraded``). Each pass on a store of the current rules tries the marked memories
again and clears the mark of each one that succeeds; ``doctor --check`` counts the ones left.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

import numpy as np

from store import retries
from store.analysis.embeddings import NameVectors
from store.analysis.linking import link_entities
from store.analysis.nlp import NLP, Analysis
from store.backend import Backend, MemoryRow, Progress, Snapshot, Transaction, require_writable
from store.errors import TrimemError
from store.scope import EVERY_SCOPE

logger = logging.getLogger(__name__)

ANALYSIS_VERSION = 2
"""The rules that turn a text into terms and entities. 1: Mem0's lemmas and spaCy's entities.
2: a capitalised word the lemmatizer does not know keeps its form ("Ines", not "ine"); no
entity of one adjective or sentence opener."""

BATCH = 128
"""Memories analysed per transaction: a batch is what a stopping server waits for (a second or
two of the language model), and what an interrupted pass loses."""
PROGRESS_EVERY = 8
"""Batches between two lines of progress."""

DEGRADED_CHECK = "analysis_degraded"
"""The name ``doctor --check`` gives the memories the language model failed on."""
DEGRADED_DETAIL = (
    "{} memories hold plain keyword terms and no entity links: the language model failed on their text when they "
    "were written. A trimem server that can write to this store analyses them again when it starts, and so does "
    "`trimem doctor --repair`: fix what the log names as the model's failure, then run either where the store can "
    "be written"
)
"""What that check reports (``str.format`` over how many), with what fixes it: the text needs
the model, so only a pass with a working model does."""


@dataclass(frozen=True)
class Backlog:
    """What a pass has to analyse again, and why."""

    memories: int
    rules_changed: bool
    """True: the memories made by older rules (the version is recorded after them; there may
    be none left, only the version to record); false: the memories marked ``analysis_degraded``."""

    @property
    def cause(self) -> str:
        """Why, after "analysing N stored memories again:"."""
        if self.rules_changed:
            return "the keyword and entity rules changed"
        return "the language model failed on them when they were written"


@dataclass(frozen=True)
class Analysed:
    """One batch of memories as read, with what the current rules make of their texts."""

    rows: list[MemoryRow]
    analyses: list[Analysis]
    vectors: dict[str, np.ndarray]


def never() -> bool:
    """A pass run to its end: nothing stops it."""
    return False


def resumed_from(view: Snapshot) -> int:
    """The key after which a pass to the current rules goes on: where the last one stopped, or
    0 when none ran (or one ran to other rules)."""
    cursor = view.reanalysis_cursor()
    return cursor[1] if cursor is not None and cursor[0] == ANALYSIS_VERSION else 0


def waiting(view: Snapshot) -> int:
    """How many memories still hold the terms and links of older rules."""
    if view.analysis_version() >= ANALYSIS_VERSION:
        return 0
    return view.count_memories_after(resumed_from(view))


def backlog(view: Snapshot) -> Backlog | None:
    """What a pass would do on this store: the memories made by older rules, else the marked
    ones; ``None`` when nothing."""
    if view.analysis_version() < ANALYSIS_VERSION:
        return Backlog(waiting(view), rules_changed=True)
    marked = len(view.degraded_memories())
    return Backlog(marked, rules_changed=False) if marked else None


def every_few_batches(write: Callable[[str], None]) -> Progress:
    """A ``progress(done, total)`` that writes "analysed again: done of total memories" after
    every ``PROGRESS_EVERY``-th batch and the last."""
    batches = 0

    def progress(done: int, total: int) -> None:
        nonlocal batches
        batches += 1
        if batches % PROGRESS_EVERY == 0 or done >= total:
            write(f"analysed again: {done:,} of {total:,} memories")

    return progress


class Reanalysis:
    """One store's pass analysing its memories again: what waits, the pass, and its thread.

    ``run`` is the pass in the caller's thread; ``begin`` starts it on a daemon thread of its
    own, which ``stop`` (the engine's ``close``) ends between two batches and waits for.
    """

    def __init__(self, backend: Backend, nlp: NLP, names: NameVectors) -> None:
        self._backend = backend
        self._nlp = nlp
        self._names = names
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None

    def waiting(self) -> int:
        """How many memories still hold the terms and links of older rules (``trimem stats``, ``doctor``)."""
        with self._backend.snapshot() as view:
            return waiting(view)

    def backlog(self) -> Backlog | None:
        """What a pass would do now (``backlog``)."""
        with self._backend.snapshot() as view:
            return backlog(view)

    def record_rules_if_empty(self) -> None:
        """Record the current rules on a store that holds no memory yet (a new one): its first
        memories follow them, and would otherwise be analysed again by the next server."""
        with self._backend.snapshot() as view:
            if view.analysis_version() >= ANALYSIS_VERSION or view.memories_after(0, 1):
                return
        retries.transact(self._backend, _adopt_rules_if_empty)

    def run(self, *, batch: int = BATCH, stop: Callable[[], bool] = never, progress: Progress | None = None) -> int:
        """Analyse again, ``batch`` memories a transaction, the memories made by older rules from
        where the last pass stopped (then record the rules), or on a store of the current rules
        the marked ones; how many memories this call rewrote. ``stop()`` is asked before each
        batch; ``progress(done, total)`` is told after each. Refused on a store this process
        cannot write."""
        require_writable(self._backend)
        with self._backend.snapshot() as view:
            older = view.analysis_version() < ANALYSIS_VERSION
        if older:
            return self._older_rules(batch, stop, progress)
        return self._marked(batch, stop, progress)

    def _older_rules(self, batch: int, stop: Callable[[], bool], progress: Progress | None) -> int:
        """The memories after the cursor, batch after batch, the cursor moved with each; the
        version recorded (and the cursor cleared) once none is left."""
        done = 0
        while not stop():
            with self._backend.snapshot() as view:
                if view.analysis_version() >= ANALYSIS_VERSION:
                    return done  # another server finished it
                after = resumed_from(view)
                rows = view.memories_after(after, batch)
                left = view.count_memories_after(after)
            if not rows:
                if retries.transact(self._backend, partial(_finish, after=after)):
                    return done
                continue  # another server moved the cursor meanwhile: more may follow it
            analysed = self._analyse(rows)
            if retries.transact(self._backend, partial(_rewrite_after, after=after, analysed=analysed)):
                done += len(rows)
                if progress is not None:
                    progress(done, done + left - len(rows))
        return done

    def _marked(self, batch: int, stop: Callable[[], bool], progress: Progress | None) -> int:
        """The memories marked ``analysis_degraded``, read once, batch after batch."""
        with self._backend.snapshot() as view:
            marked = view.degraded_memories()
        done = 0
        for start in range(0, len(marked), batch):
            if stop():
                break
            rows = marked[start : start + batch]
            retries.transact(self._backend, partial(_rewrite, analysed=self._analyse(rows)))
            done += len(rows)
            if progress is not None:
                progress(done, len(marked))
        return done

    def _analyse(self, rows: list[MemoryRow]) -> Analysed:
        """The current rules' terms and entities of ``rows``' texts, and the entities' vectors:
        the models' work, done before the batch's transaction."""
        analyses = self._nlp.analyze_batch([row.text for row in rows])
        entities = list(dict.fromkeys(e.normalized for a in analyses for e in a.entities))
        return Analysed(rows, analyses, dict(zip(entities, self._names.embed(entities))))

    def begin(self) -> None:
        """Start the pass on a thread of its own, when this process can write the store and
        something waits: a server's start-up, once its models are warm. Says so on stderr (the
        log), with the count, when it starts and when it ends."""
        if self._backend.read_only or self._thread is not None or self._stopping.is_set():
            return
        if (work := self.backlog()) is None:
            return
        if work.memories:
            meanwhile = "searches meanwhile use the older terms" if work.rules_changed else "meanwhile they keep them"
            logger.warning("analysing %s stored memories again in the background: %s; %s",
                           f"{work.memories:,}", work.cause, meanwhile)
        self._thread = threading.Thread(target=self._in_background, args=(work,), name="trimem-reanalysis",
                                        daemon=True)
        self._thread.start()

    def _in_background(self, work: Backlog) -> None:
        """``run`` until done or stopped, every outcome said in the log, never raised: a pass
        that failed leaves the store as its last batch committed it, for the next start."""
        started = time.monotonic()
        try:
            done = self.run(stop=self._stopping.is_set, progress=every_few_batches(logger.info))
        except TrimemError as exc:
            logger.error("analysing stored memories again stopped (%s); the next start resumes it", exc)
            return
        except Exception:
            logger.exception("analysing stored memories again failed; the next start resumes it")
            return
        if self._stopping.is_set():
            logger.info("stopped analysing stored memories again after %s, for the shutdown; the next start resumes",
                        f"{done:,}")
        elif work.memories:
            logger.warning("done analysing %s stored memories again, in %.0f s: %s", f"{done:,}",
                           time.monotonic() - started,
                           "searches use the current terms" if work.rules_changed else "the marks are updated")

    def stop(self) -> None:
        """End the background pass after its current batch, and wait for it (before the store closes)."""
        self._stopping.set()
        if self._thread is not None:
            self._thread.join()


def _adopt_rules_if_empty(txn: Transaction) -> None:
    """Record the current rules, when the store still holds no memory and older rules."""
    if txn.analysis_version() < ANALYSIS_VERSION and not txn.memories_after(0, 1):
        txn.set_analysis_version(ANALYSIS_VERSION)
        txn.set_reanalysis_cursor(None)


def _rewrite_after(txn: Transaction, after: int, analysed: Analysed) -> bool:
    """One batch of the pass to the current rules, and the cursor moved past it; nothing (false)
    when another server moved the cursor or recorded the rules since the batch was read."""
    if resumed_from(txn) != after or txn.analysis_version() >= ANALYSIS_VERSION:
        return False
    _rewrite(txn, analysed)
    txn.set_reanalysis_cursor((ANALYSIS_VERSION, analysed.rows[-1].rowid))
    return True


def _finish(txn: Transaction, after: int) -> bool:
    """Record the current rules and clear the cursor, when no server moved it since it was read."""
    if txn.analysis_version() >= ANALYSIS_VERSION:
        return True
    if resumed_from(txn) != after:
        return False
    txn.set_analysis_version(ANALYSIS_VERSION)
    txn.set_reanalysis_cursor(None)
    return True


def _rewrite(txn: Transaction, analysed: Analysed) -> None:
    """One batch's new terms, marks and entity links, for the memories still as they were read."""
    current = txn.memories_by_rowid([row.rowid for row in analysed.rows], EVERY_SCOPE)
    for read, analysis in zip(analysed.rows, analysed.analyses):
        row = current.get(read.rowid)
        if row is None or row.text != read.text:
            continue  # deleted or edited since: its own write analysed it
        txn.set_terms(read.rowid, read.scope, analysis.lemmatized)
        txn.set_analysis_degraded(read.rowid, read.scope, analysis.degraded)
        txn.unlink_entities(read.rowid, read.scope)
        link_entities(txn, read.rowid, read.scope, analysis.entities, analysed.vectors)
    txn.delete_orphan_entities()
