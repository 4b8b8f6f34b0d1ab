"""The benchmark's arithmetic by hand, its data loading, and a tiny end-to-end quality run.

The full benchmarks are not part of the test run (``python -m bench quality`` and
``python -m bench speed``); this checks that they compute what they claim on a slice.
"""

from __future__ import annotations

import contextlib
import json
import math
import time
from pathlib import Path

import numpy as np
import pytest

from bench import corpus, locomo, metrics, quality, ranking_cost, recall, report, speed
from bench.scope_search import SCOPE
from bench.stages import SEARCH_STAGES, StageClock, StoreClock, store_clocks
from mcp_server.tools.server import TOOLS
from store import Config, Engine, MemoryInput
from store.ranking import learned
from store.sqlite.signals import SignalReads

# --- metrics, computed by hand ---------------------------------------------------------------


def test_recall_counts_relevant_ids_in_the_first_k():
    ranked = ["a", "x", "b", "y", "c"]
    assert metrics.recall_at(ranked, {"a", "b", "z"}, 1) == pytest.approx(1 / 3)
    assert metrics.recall_at(ranked, {"a", "b", "z"}, 3) == pytest.approx(2 / 3)
    assert metrics.recall_at(ranked, {"a", "b", "z"}, 20) == pytest.approx(2 / 3)
    assert metrics.recall_at(ranked, set(), 5) == 0.0
    assert metrics.recall_at([], {"a"}, 5) == 0.0


def test_ndcg_discounts_by_log_rank_and_normalises_by_the_ideal():
    # relevant at ranks 2 and 4: DCG = 1/log2(3) + 1/log2(5); ideal = 1/log2(2) + 1/log2(3)
    dcg = 1 / math.log2(3) + 1 / math.log2(5)
    ideal = 1 + 1 / math.log2(3)
    assert metrics.ndcg_at(["x", "a", "y", "b"], {"a", "b"}, 10) == pytest.approx(dcg / ideal)
    assert metrics.ndcg_at(["a", "b", "x"], {"a", "b"}, 10) == pytest.approx(1.0)
    # one of three relevant, at rank 1: 1 / (1 + 1/log2(3) + 1/2)
    assert metrics.ndcg_at(["a"], {"a", "b", "c"}, 10) == pytest.approx(1 / (1 + 1 / math.log2(3) + 0.5))
    # the ideal is cut at k: two relevant, k = 1, found at rank 1 → 1.0
    assert metrics.ndcg_at(["a", "b"], {"a", "b"}, 1) == pytest.approx(1.0)
    assert metrics.ndcg_at(["a", "a"], {"a", "b"}, 10) == pytest.approx(1 / ideal)  # a repeat never counts twice


def test_reciprocal_rank_is_of_the_first_relevant_id():
    assert metrics.reciprocal_rank(["x", "y", "a", "b"], {"a", "b"}) == pytest.approx(1 / 3)
    assert metrics.reciprocal_rank(["x"], {"a"}) == 0.0
    assert metrics.first_rank(["x", "a"], {"a"}) == 2
    assert metrics.first_rank([], {"a"}) is None


def test_mean_averages_each_metric():
    rows = [metrics.score(["a"], {"a"}), metrics.score(["x"], {"a"})]
    assert metrics.mean(rows) == {name: 0.5 for name in metrics.METRICS}
    assert metrics.mean([]) == {name: 0.0 for name in metrics.METRICS}


# --- LoCoMo loading -------------------------------------------------------------------------


def test_malformed_evidence_is_split_normalised_and_checked():
    known = {"D8:6", "D9:17", "D11:26", "D30:5", "D1:18"}
    assert locomo.normalize_evidence(["D8:6; D9:17"], known) == ("D8:6", "D9:17")
    assert locomo.normalize_evidence(["D:11:26", "D30:05", "D"], known) == ("D11:26", "D30:5")
    assert locomo.normalize_evidence(["D1:18", "D1:18", "D2:1"], known) == ("D1:18",)


def test_a_sample_becomes_turns_and_scored_questions():
    raw = {
        "sample_id": "s1",
        "conversation": {
            "speaker_a": "Ann",
            "speaker_b": "Bo",
            "session_2": [{"speaker": "Bo", "dia_id": "D2:1", "text": "Later."}],
            "session_2_date_time": "2 May",
            "session_1": [
                {"speaker": "Ann", "dia_id": "D1:1", "text": "Hi!"},
                {"speaker": "Bo", "dia_id": "D1:2", "text": "Look.", "blip_caption": "a photo of a cat"},
            ],
            "session_1_date_time": "1 May",
        },
        "qa": [
            {"question": "q1", "answer": "a", "evidence": ["D1:2"], "category": 4},
            {"question": "q5", "answer": "a", "evidence": ["D1:1"], "category": 5},
            {"question": "q-none", "answer": "a", "evidence": ["D7:7"], "category": 1},
        ],
    }
    sample = locomo.parse_sample(raw)
    assert [t.key for t in sample.memories] == ["D1:1", "D1:2", "D2:1"]
    assert sample.memories[1].text == "Bo: Look. [shares a photo of a cat]"
    assert sample.memories[2].session_date == "2 May"
    assert [q.text for q in sample.questions] == ["q1"]
    assert sample.skipped_questions == 1
    assert locomo.head(sample, max_turns=1).questions == ()


def test_facts_are_the_observations_and_answer_through_their_evidence_turns():
    raw = {
        "sample_id": "s",
        "conversation": {
            "speaker_a": "Ann", "speaker_b": "Bo",
            "session_1": [
                {"speaker": "Ann", "dia_id": "D1:1", "text": "I adopted a cat."},
                {"speaker": "Bo", "dia_id": "D1:2", "text": "I run marathons."},
                {"speaker": "Ann", "dia_id": "D1:3", "text": "Nice!"},
            ],
            "session_1_date_time": "1 May",
        },
        "observation": {
            "session_1_observation": {
                "Ann": [["Ann adopted a cat.", "D1:1"], ["Ann likes cats.", ["D1:1", "D1:3"]]],
                "Bo": [["Bo runs marathons.", "D1:02"]],
            }
        },
        "qa": [
            {"question": "What pet?", "answer": "a cat", "evidence": ["D1:1"], "category": 4},
            {"question": "What sport?", "answer": "running", "evidence": ["D1:2; D1:3"], "category": 1},
            {"question": "Hi?", "answer": "-", "evidence": ["D9:9"], "category": 4},
        ],
    }
    sample = locomo.parse_sample(raw, shape="facts")
    assert [(m.key, m.text, m.session_date) for m in sample.memories] == [
        ("F1", "Ann adopted a cat.", "1 May"), ("F2", "Ann likes cats.", "1 May"), ("F3", "Bo runs marathons.", "1 May"),
    ]
    assert [(q.text, q.evidence) for q in sample.questions] == [("What pet?", ("F1", "F2")), ("What sport?", ("F3", "F2"))]
    assert sample.skipped_questions == 1


def test_the_shipped_data_loads_as_the_readme_describes():
    samples = locomo.load()
    assert sum(len(s.memories) for s in samples) == 2760
    assert all(q.category in locomo.CATEGORIES for s in samples for q in s.questions)
    facts = locomo.load(shape="facts")
    assert sum(len(s.memories) for s in facts) == 1210
    assert all(q.evidence for s in facts for q in s.questions)


# --- speed helpers ------------------------------------------------------------------------------


def test_the_corpus_is_distinct_real_turns():
    samples = locomo.load()
    texts = corpus.texts(samples, 3000)
    assert len(texts) == len(set(texts)) == 3000
    assert texts[0] == samples[0].memories[0].text


@pytest.mark.only_on("sqlite")
def test_stage_clock_times_a_real_search_and_restores_the_engine(engine: Engine):
    engine.add("Ana is allergic to peanuts", user_id="ana")
    clock = StageClock()
    embed = engine.embedder.embed_batch
    knn = SignalReads.first_signals
    with clock.active(engine, SEARCH_STAGES):
        engine.search("peanut allergy", user_id="ana")
    parts = clock.reset()
    assert {"query embedding", "lemmatize + entities", "vector KNN ∥ keywords", "keywords (BM25)"} <= set(parts)
    assert SignalReads.first_signals is knn  # the very function, not a wrapper that copied its name
    assert "embed_batch" not in vars(engine.embedder) and engine.embedder.embed_batch == embed


def test_the_store_clock_counts_snapshots_and_reads_once_and_not_what_a_read_is_handed():
    """Pure accounting, on a clock that moves only when the code below says so."""
    now = [0.0]

    class View:
        def knn(self, embedding):  # 2 s of its own, and the 5 s of the embedding it waits for
            now[0] += 1
            vector = embedding()
            now[0] += 1
            return vector

        def outer(self):  # 3 s of its own, and a read of its own inside it
            now[0] += 3
            return self.inner()

        def inner(self):
            now[0] += 4
            return "inner"

    class Backend:
        location = "here"

        @contextlib.contextmanager
        def snapshot(self):
            now[0] += 0.5
            yield View()
            now[0] += 0.25

    def embedding():
        now[0] += 5
        return "vector"

    clock = StoreClock(Backend(), timer=lambda: now[0])
    with clock.snapshot() as view:
        assert view.knn(embedding) == "vector" and view.outer() == "inner"
        now[0] += 100  # the engine's own work between reads
    assert clock.location == "here" and clock.spent == 0.5 + 2 + 7 + 0.25


def test_the_store_clock_times_a_real_search_and_gives_the_engine_its_backend_back(engine: Engine):
    engine.add("Ana is allergic to peanuts", user_id="ana")
    backend = engine.backend
    with store_clocks({"store": engine}) as clocks:
        started = time.perf_counter()
        assert [hit.memory.text for hit in engine.search("what is Ana allergic to?", user_id="ana")] == [
            "Ana is allergic to peanuts"]
        took = time.perf_counter() - started
    assert 0 < clocks["store"].spent < took
    assert engine.backend is backend


# --- a tiny quality run end to end ------------------------------------------------------------


def test_quality_on_a_slice(config: Config, embedder, nlp, tmp_path: Path):
    (sample,) = [s for s in locomo.load() if s.sample_id == "conv-26"]
    tiny = locomo.head(sample, max_turns=40, max_questions=5)
    variants = [v for v in quality.VARIANTS if v.name in ("semantic only", quality.REFERENCE, quality.DEFAULT)]
    run = quality.run([tiny], config, embedder, nlp, variants)

    assert run.memories == 40 and len(run.questions) == len(tiny.questions) > 0
    assert [r.variant.name for r in run.results] == [v.name for v in variants]
    for result in run.results:
        assert len(result.scores) == len(run.questions)
        assert all(0.0 <= value <= 1.0 for value in result.overall().values())
        assert result.overall()["recall@5"] <= result.overall()["recall@10"] <= result.overall()["recall@20"]
    table = quality.overall_table(run).splitlines()
    assert len(table) == 2 + len(variants)
    assert table[0].split("|")[2:7] == [f" {name} " for name in metrics.METRICS]
    for case in run.failures:
        json.dumps(case)  # the failure file is JSON lines
        assert {"semantic", "bm25", "entity_boost", "rank", "reason"} <= set(case["evidence"][0])

    doc = tmp_path / "benchmarks.md"
    report.write_section("quality", "stale-quality-figures", doc)
    report.write_section("speed", "speed figures", doc)
    report.write_section("quality", quality.markdown(run, "turns", "python -m bench quality", "env", Path("x.json")), doc)
    text = doc.read_text()
    assert text.count("<!-- quality:start -->") == 1 and "speed figures" in text and "stale-quality-figures" not in text


@pytest.mark.only_on("sqlite")
def test_the_engines_ranking_is_the_one_the_recall_bench_scores(config: Config, embedder, nlp):
    """On a slice of a conversation, what search returns is what ``bench/recall.py`` finds by scoring
    the candidates it kept with the shipped weights and the configured floor; a fit on them is a
    model the engine can run."""
    (sample,) = [s for s in locomo.load() if s.sample_id == "conv-30"]
    tiny = locomo.head(sample, max_turns=60, max_questions=10)
    floor = config.search.min_score
    with Engine(config, embedder=embedder, nlp=nlp) as engine:
        asked = recall.ask_all(engine, "LoCoMo turns", [tiny], quality.ingest(engine, [tiny]), foreign=False)
        searched = [[hit.memory.id for hit in engine.search(a.text, user_id=a.sample, top_k=recall.TOP_K)
                     if not hit.standing] for a in asked]
    assert len(asked) == len(tiny.questions) > 0 and all(a.candidates and len(a.ids) == len(a.candidates) for a in asked)
    assert [recall.returned(a, learned.shipped(), floor)[0] for a in asked] == searched
    assert any(searched) and any(a.relevant & set(ids) for a, ids in zip(asked, searched, strict=True))
    for a in asked:
        a.sample = "conv-26"  # a tune conversation, so the fit sees them
    weights = recall.fit(asked)
    assert weights.features == tuple(learned.FEATURES) and np.all(np.isfinite(weights.coefficients))
    assert recall.figures(asked, weights, floor)["own"] == len(asked)


def test_delete_all_is_timed_on_a_built_scope(config: Config, embedder, nlp, monkeypatch, tmp_path: Path):
    monkeypatch.setattr(report, "RESULTS", tmp_path)
    run = speed.measure_delete_all(config, embedder, nlp, 120)
    assert run.memories == 120 and run.entities > 0 and run.seconds > 0
    assert "| 120 |" in speed.delete_table(run)


def test_the_ranking_cost_asks_both_rankings_every_question(engine: Engine):
    texts = ("Ana is allergic to peanuts", "Ben plays chess")
    engine.add_many([MemoryInput(text) for text in texts], user_id=SCOPE)
    mem0_config = engine.config.replace("search", ranking="mem0")
    questions = ["peanut allergy", "who plays chess?", "Ana", "mortgage rate"]
    with Engine(mem0_config, embedder=engine.embedder, nlp=engine.nlp) as mem0:
        ours, theirs, nothing = ranking_cost.interleaved(engine, mem0, questions)
    assert len(ours) == len(theirs) == len(questions) and min(ours + theirs) > 0
    assert nothing == 1  # "mortgage rate" has no answer here; the others do


def test_the_everyday_questions_are_asked_among_other_memories(engine: Engine):
    engine.add_many([MemoryInput(text) for text in ("Ben plays chess", "The train leaves at noon")],
                    user_id=SCOPE)
    found, nothing = ranking_cost.asked_everyday(engine)
    assert found == 1.0 and nothing >= 0.8  # two unrelated questions are answered (tests/test_relevance.py)


def test_transfer_benchmark_runs_on_a_slice(capsys: pytest.CaptureFixture[str]) -> None:
    """Export and import of a few memories, each beside its floor; nothing written to the docs."""
    from bench import transfer

    assert transfer.main(["--memories", "12", "--no-doc"]) == 0
    out = capsys.readouterr().out
    assert "| export (`Engine.export` to a file) | 12 |" in out
    assert "| import (`Engine.import_memories`) | 12 |" in out and "`add_many` of the same texts" in out


# --- what an MCP client feels, beside the peer ------------------------------------------------------


def test_client_benchmark_on_a_slice_says_the_peer_is_absent(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """What CI runs, where the peer is not installed: trimem over both clients and its floor on 12
    turns; the report says plainly that the peer was not measured and judges nothing that needs it."""
    from bench import client, peer

    monkeypatch.setattr(peer, "SERVER_SCRIPT", tmp_path / "peer-venv" / "bin" / "memory")
    run = client.run(memories=12, queries=3, folder=tmp_path)

    assert run.peer is None and "is not installed" in run.peer_missing
    timed = {(client.INGEST, client.SDK): 12, (client.SEARCH, client.SDK): 3, (client.SEARCH, client.RAW): 3,
             (client.ADD, client.RAW): 3, (client.ADD, client.SDK): 3}
    assert {key: len(times) for key, times in run.trimem.seconds.items()} == timed
    assert {kind: len(run.floor.seconds[kind, client.ENGINE]) for kind in (client.INGEST, client.SEARCH, client.ADD)} \
        == {client.INGEST: 12, client.SEARCH: 3, client.ADD: 3}
    assert set(run.trimem.tools.chars) == {tool.__name__ for tool, _ in TOOLS}
    for top_k in client.TOP_KS:
        sizes = run.trimem.replies[top_k]
        assert sizes.replies == 3 and 0 < sizes.results <= 3 * min(top_k, 12)
        assert 0 < sizes.own_chars < sizes.text_chars < sizes.structured_chars < sizes.wire_bytes

    text = client.markdown(run, "python -m bench client --memories 12 --queries 3", "env")
    assert f"**The peer was not measured**: {peer.NAME} is not installed" in text
    assert "run `python -m bench peer` to install it" in text
    assert text.count("n/a: peer not run") == 5  # search raw and SDK, add raw and SDK, ingest
    assert "| names + descriptions + input schemas, chars |" in text and "| 12 single adds, SDK client" in text


def test_a_failed_call_stops_the_client_benchmark_with_the_servers_message(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Figures from failed calls are not figures: the run stops and says which call failed and why."""
    import dataclasses

    from bench import client

    trimem_server = client.trimem_server

    def sending_both(home: Path) -> client.Server:  # add_memory refuses text and messages in one call
        return dataclasses.replace(trimem_server(home), add_arguments=lambda text: {
            "text": text, "messages": [{"role": "user", "content": text}]})

    monkeypatch.setattr(client, "FOLDER", tmp_path)
    monkeypatch.setattr(client, "trimem_server", sending_both)

    assert client.main(["--memories", "3", "--queries", "1", "--no-peer", "--no-doc"]) == 1
    captured = capsys.readouterr()
    assert captured.err.startswith("the client benchmark stopped: trimem: add_memory failed: ")
    assert "send exactly one of text" in captured.err and "Traceback" not in captured.err and not captured.out


def test_servers_are_asked_in_turn_the_first_swapping_every_call() -> None:
    from bench import client

    assert list(client.in_turn(3, 2)) == [(0, 0), (0, 1), (1, 1), (1, 0), (2, 0), (2, 1)]


def test_the_peers_search_text_is_read_result_by_result() -> None:
    """The layout of its ``memory_search`` text (``_format_search_memory`` in its server handlers)."""
    from bench import peer

    text = (
        "Found 2 memories (mode: hybrid) for query: 'Where does Ana work?'\n\n"
        "1. Ana: I work at the hospital.\nSecond line.\n   Hash: 0b8c12a3\n"
        "   Created: 2026-12-03T09:49:26Z [untagged]\n\n"
        "2. Bo: 3. Not a result.\n   Hash: ae2f0e7d\n   Created: 2026-12-03T09:49:27Z"
    )
    assert peer.found_texts(text) == ["Ana: I work at the hospital.\nSecond line.", "Bo: 3. Not a result."]
    assert peer.found_texts("Found 0 memories (mode: hybrid)") == []
    assert peer.refused(peer.ADD_TOOL, "Failed to initialize SQLite-vec storage: extension loading not supported")
    assert peer.refused(peer.SEARCH_TOOL, "Error searching memories: database is locked")
    assert not peer.refused(peer.ADD_TOOL, "Memory stored successfully (hash: 0b8c12a3)")


def _peer_absent() -> str | None:
    from bench import peer

    return peer.missing()


@pytest.mark.skipif(_peer_absent() is not None, reason=f"the peer is not measured here: {_peer_absent()}")
def test_the_peer_stores_and_answers_as_the_benchmark_reads_it(tmp_path: Path) -> None:
    """The real peer over raw JSON-RPC: every add counted as stored, its search read back whole, and
    a refused add (an exact repeat) caught though the peer answers most failures as plain text."""
    import anyio

    from bench import client

    server = client.peer_server(tmp_path)
    texts = ["Ana works as a nurse at Santa Maria hospital", "Bo plays chess on Sundays", "Ana's brother is a chef"]

    async def ask() -> tuple[list[client.Answer], Exception]:
        with client.raw_client(server, tmp_path) as raw:
            await client.ask_in_turn([raw], client.adds(texts))
            (answers,) = await client.ask_in_turn([raw], client.searches(["Where does Ana work?"], top_k=5))
            try:
                await client.ask_in_turn([raw], client.adds(texts[:1]))
            except RuntimeError as exc:
                return answers, exc
        raise AssertionError("the peer stored an exact repeat")

    (answer,), refusal = anyio.run(ask)
    assert sorted(server.found_texts(answer.reply)) == sorted(texts)
    assert str(refusal).startswith(f"{server.name}: {server.add_tool} failed")


def test_a_spawned_trimem_imports_this_checkout(tmp_path: Path) -> None:
    """The SDK's ``stdio_client`` passes no ``PYTHONPATH``: unless the server's environment names this
    checkout, an installed ``trimem`` of another checkout is what the benchmarks measure."""
    import subprocess
    import sys

    from mcp.client.stdio import get_default_environment

    from bench import stdio

    script = tmp_path / "console_script.py"  # as ``trimem``: its own folder first on the path, not the cwd
    script.write_text("import mcp_server\nprint(mcp_server.__file__)\n")
    env = get_default_environment() | stdio.server_env(tmp_path)
    where = subprocess.run([sys.executable, str(script)], env=env, cwd=tmp_path, capture_output=True, text=True,
                           check=True).stdout.strip()
    assert Path(where).parent == report.ROOT / "mcp_server"


# --- the HTTP service under load (bench/load.py) ------------------------------------------------


def test_load_run_counts_every_call_and_loses_no_acknowledged_write(config: Config, db_arg: str,
                                                                    tmp_path: Path) -> None:
    from bench import load

    run = load.measure(db_arg, "test", processes=2, sessions=2, calls=10, log=tmp_path / "servers.log")
    assert run.errors == []
    assert len(run.latencies) == 2 * 10
    assert len(run.acknowledged) == 2 * 2  # every fifth call of each session is an add
    assert run.lost == 0
    assert run.seconds > 0
    assert "Traceback" not in (tmp_path / "servers.log").read_text()


# --- SQLite and PostgreSQL side by side --------------------------------------------------------------


def test_backends_benchmark_on_a_slice(
    postgres_server: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Both stores loaded through the seam, searched in turn beside their floors, written to by
    ``add_many``; every figure in the table and the JSON, PostgreSQL's HNSW indexes rebuilt."""
    from bench import backends, postgres

    monkeypatch.setattr(report, "RESULTS", tmp_path)
    arguments = ["--sizes", "40", "--users", "4", "--one-scope", "30", "--beside", "3", "--queries", "3", "--batch", "5"]
    assert backends.main([*arguments, "--database-url", postgres_server, "--no-doc"]) == 0

    out = capsys.readouterr().out
    for case in ("40 over 4 users", "30 in one scope", "30 in one scope beside 3 users of 10"):
        assert f"| {case} | SQLite | **" in out and f"| {case} | PostgreSQL | **" in out
    assert "| PostgreSQL search p50, 40 over 4 users, ms |" in out and "1,000,000 memories were not run" in out
    cases = json.loads((tmp_path / "backends.json").read_text())["cases"]
    assert [(case["memories"], case["users"], case["beside"], case["queries"]) for case in cases] == [
        (40, 4, 0, 3), (30, 1, 0, 3), (30, 1, 3, 3)]
    for case in cases:
        assert case["SQLite"]["hnsw_bytes"] == {} and case["SQLite"]["search_p50_ms"] > 0
        for name in ("SQLite", "PostgreSQL"):
            assert case[name]["keywords_p50_ms"] > 0 and case[name]["keywords_through_memories_p50_ms"] > 0
        assert set(case["PostgreSQL"]["hnsw_bytes"]) == set(postgres.HNSW_INDEXES)
        assert min(case["PostgreSQL"]["hnsw_bytes"].values()) > 0 and case["PostgreSQL"]["add_many_per_s"] > 0
    assert not list(tmp_path.glob("backends.db*"))  # each case's stores are removed with it
    with postgres.connect(postgres_server) as admin:
        left = admin.execute("SELECT count(*) FROM pg_database WHERE datname = %s", (backends.DATABASE,)).fetchone()
    assert left == (0,)


def test_models_benchmark_runs_on_a_slice(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """One model on one backend: its row, its floor, and itself as the baseline; nothing written to the docs."""
    from bench import models

    assert models.main(["--models", "all-MiniLM-L6-v2", "--backends", "onnx", "--size", "60", "--queries", "5",
                        "--db", str(tmp_path / "models.db"), "--no-doc"]) == 0
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if line.startswith("| all-MiniLM-L6-v2 |"))
    cells = [cell.strip() for cell in row.strip("|").split("|")]
    assert cells[1:3] == ["onnx-fp32", "384"] and cells[-1] == "1.000"
    assert float(cells[5]) > float(cells[7]) > 0  # a search costs more than its floor
    assert not (tmp_path / "models.db").exists()
