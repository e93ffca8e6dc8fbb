"""The verdict of a live run is never silently wrong (docs/live_systems.md), through the real paths:
memeval-run with a user's own Python adapter class (`WordOverlap` below, named by
`system.adapter._target_`) and memeval-serve over HTTP.

- ids the suite does not hold, and memories of another scope, keep the rank the service gave them as hits
  that are not relevant: 10 junk ids first make RR 1/11 where the honest service has 1, and trec_eval
  (pytrec_eval) on the run's own run.trec gives each query the same RR as per_query.csv;
- leaks show in the top-level `scope_leaks` and on the console;
- a NaN or infinite score is exit 2 naming the query;
- a replay is keyed by its cassette's content, never its path; an edited line with its checksum
  recomputed is exit 2 naming the file and line; a cassette of another format is refused;
- a cassette that is a FIFO, a directory or a device is exit 2 at once, naming it;
- a record run whose cassette is complete needs no service; its latency is the service's, and a
  replay reports the recorded latency and says so.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest

from experiments.suites.jsonl import save_suite
from experiments.systems.protocol import Hit, LiveSystemError, SearchRequest
from retrieval.types import Memory, scope_key
from tests.support import REPO, tiny_suite

ENV = {**os.environ, "MLFLOW_TRACKING_URI": "", "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(REPO)}
ADAPTER = "system.adapter._target_=tests.live.test_live_verdict.WordOverlap"


class WordOverlap:
    """A user's own memory store, as a Python adapter (the protocol of experiments/systems/protocol.py):
    ranks a scope's memories by the words they share with the query. It can misbehave on purpose:
    `junk` ids it never stored first, `leak` memories of another scope first, a `bad_score` on the first
    hit, a `delay_s` per search, or `down`: not there at all (every call fails). Its `fingerprint()` (what
    a cassette is keyed by) is what it answers by, not how it is deployed (`delay_s`, `down`), as for the
    HTTP adapter; `WORD_OVERLAP_RELEASE=2` in its environment is a redeployed store that ranks worst first
    under the very same config."""

    def __init__(
        self,
        junk: int = 0,
        leak: int = 0,
        bad_score: str | None = None,
        delay_s: float = 0.0,
        down: bool = False,
    ):
        self.junk, self.leak, self.bad_score, self.delay_s, self.down = junk, leak, bad_score, delay_s, down
        self.stored: dict[str, list[Memory]] = {}

    def fingerprint(self) -> str:
        return f"WordOverlap(junk={self.junk}, leak={self.leak}, bad_score={self.bad_score})"

    def check_available(self) -> None:
        if self.down:
            raise LiveSystemError("the word-overlap store is down (nothing was run)")

    def reset(self, scope: Mapping[str, str]) -> None:
        self.check_available()
        self.stored[scope_key(scope)] = []

    def ingest(self, scope: Mapping[str, str], memories: Sequence[Memory]) -> None:
        self.check_available()
        self.stored.setdefault(scope_key(scope), []).extend(memories)

    def wait_until_searchable(self, scope: Mapping[str, str], memories: Sequence[Memory]) -> float:
        return 0.0

    def search(self, request: SearchRequest) -> list[Hit]:
        self.check_available()
        time.sleep(self.delay_s)
        words = set(request.text.lower().split())
        own = self.stored.get(scope_key(request.scope), [])
        ranked = sorted(own, key=lambda m: (-len(words & set(m.text.lower().split())), m.id))
        if os.environ.get("WORD_OVERLAP_RELEASE") == "2":
            ranked.reverse()
        hits = [Hit(m.id, float(len(words & set(m.text.lower().split()))), m.text) for m in ranked]
        others = [m for key, ms in sorted(self.stored.items()) if key != scope_key(request.scope) for m in ms]
        junk = [Hit(f"junk-{i}", 100.0 - i, "an advert") for i in range(self.junk)]
        leaks = [Hit(m.id, 50.0 - i, m.text) for i, m in enumerate(others[: self.leak])]
        hits = junk + leaks + hits
        if self.bad_score is not None:
            hits[0] = Hit(hits[0].id, float(self.bad_score), hits[0].text)
        return hits[: request.k]

    def close(self) -> None:
        pass


@pytest.fixture(scope="module")
def suite_dir(tmp_path_factory) -> Path:
    return save_suite(tiny_suite(), tmp_path_factory.mktemp("suite") / "tiny")


def run(
    cwd: Path,
    run_dir: Path,
    suite: Path,
    *overrides: str,
    timeout: float = 600,
    env: dict | None = None,
    url: str | None = None,
) -> subprocess.CompletedProcess:
    """memeval-run of the system variant over `suite`: through `WordOverlap`, or memeval-serve at `url`;
    untracked unless `overrides` say how to track."""
    adapter = [f"system.base_url={url}"] if url else ["~system.adapter", f"+{ADAPTER}"]
    args = [
        sys.executable, "-m", "experiments.run", f"hydra.run.dir={run_dir}", f"cache_dir={cwd / 'cache'}",
        "progress=false", "suite=jsonl", f"suite.path={suite}", "variant=system", *adapter, *overrides,
    ]  # fmt: skip
    if not any(o.startswith("tracking") for o in overrides):
        args.append("tracking=none")
    return subprocess.run(
        args, cwd=cwd, env={**ENV, **(env or {})}, capture_output=True, text=True, timeout=timeout
    )


def metrics(run_dir: Path) -> dict:
    return json.loads((run_dir / "metrics.json").read_text())


def per_query(run_dir: Path) -> dict[str, dict[str, str]]:
    import csv

    with open(run_dir / "per_query.csv", newline="") as fh:
        return {row["query_id"]: row for row in csv.DictReader(fh)}


def trec_eval_rr(run_dir: Path) -> dict[str, float]:
    """trec_eval's own reciprocal rank (pytrec_eval: its C code) of the run's run.trec against its qrels."""
    import pytrec_eval

    qrels: dict[str, dict[str, int]] = {}
    for line in (run_dir / "qrels.tsv").read_text().splitlines():
        qid, _, doc, grade = line.split()
        qrels.setdefault(qid, {})[doc] = int(grade)
    ranking: dict[str, dict[str, float]] = {}
    for line in (run_dir / "run.trec").read_text().splitlines():
        qid, _, doc, _, score, _ = line.split()
        ranking.setdefault(qid, {})[doc] = float(score)
    judged = {q: r for q, r in qrels.items() if any(g > 0 for g in r.values())}
    scores = pytrec_eval.RelevanceEvaluator(judged, {"recip_rank"}).evaluate(ranking)
    return {q: v["recip_rank"] for q, v in scores.items()}


def ok(proc: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc


def test_ten_junk_ids_first_keep_their_rank_so_rr_is_1_over_11_and_trec_eval_agrees(tmp_path, suite_dir):
    ok(run(tmp_path, tmp_path / "honest", suite_dir))
    ok(run(tmp_path, tmp_path / "junk", suite_dir, "+system.adapter.junk=10"))
    honest, junk = per_query(tmp_path / "honest"), per_query(tmp_path / "junk")
    assert float(honest["c1:q0"]["RR"]) == 1.0  # the honest store ranks its answer first
    assert float(junk["c1:q0"]["RR"]) == pytest.approx(1 / 11)  # after 10 ids it never stored
    for qid, rr in trec_eval_rr(tmp_path / "junk").items():
        assert float(junk[qid]["RR"]) == pytest.approx(rr, abs=1e-12)
        assert rr == pytest.approx(1 / (10 + 1 / float(honest[qid]["RR"])))  # each hit 10 ranks lower
    first = (tmp_path / "junk" / "run.trec").read_text().splitlines()[0].split()
    assert first[2:4] == ["junk-0", "1"]  # written as the id the service returned, at its rank
    system = metrics(tmp_path / "junk")["system"]
    assert system["unknown_ids"] == 10 * 4 and "scope_leaks" not in system  # leaks: the run's count only


def test_other_scope_hits_keep_their_rank_and_show_in_the_top_level_scope_leaks_and_console(
    tmp_path, suite_dir
):
    proc = ok(run(tmp_path, tmp_path / "leaky", suite_dir, "+system.adapter.leak=2"))
    found = metrics(tmp_path / "leaky")
    assert found["system"]["unknown_ids"] == 0 and "scope_leaks" not in found["system"]
    assert found["scope_leaks"] == 2 * 4  # counted once, by the run's own check
    assert "scope leaks 8;" in proc.stdout
    assert float(per_query(tmp_path / "leaky")["c1:q0"]["RR"]) == pytest.approx(1 / 3)
    leaked = (tmp_path / "leaky" / "run.trec").read_text().splitlines()[0].split()
    assert leaked[0] == "c1:q0" and leaked[2].startswith("c2:")


@pytest.mark.parametrize("bad", ["nan", "inf", "-inf"])
def test_a_nan_or_infinite_score_is_exit_2_naming_the_query(tmp_path, suite_dir, bad):
    proc = run(tmp_path, tmp_path / "run", suite_dir, f"+system.adapter.bad_score={bad}")
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "a score must be a finite number" in proc.stderr
    assert any(f"query {q}: result 1" in proc.stderr for q in ("c1:q0", "c1:q1", "c2:q0", "c2:q1"))
    assert not (tmp_path / "run" / "metrics.json").exists()


def replay(cwd: Path, run_dir: Path, suite: Path, cassette: Path, *overrides: str, **options):
    return run(
        cwd, run_dir, suite, "system.mode=replay", f"system.cassette={cassette}", *overrides, **options
    )


def record(cwd: Path, run_dir: Path, suite: Path, cassette: Path, *overrides: str, **options):
    return run(
        cwd, run_dir, suite, "system.mode=record", f"system.cassette={cassette}", *overrides, **options
    )


def test_a_replay_is_keyed_by_its_cassettes_content_never_its_path(tmp_path, suite_dir):
    cassette, redeployed = tmp_path / "c.jsonl", tmp_path / "redeployed.jsonl"
    ok(record(tmp_path, tmp_path / "rec", suite_dir, cassette))
    release_2 = {"WORD_OVERLAP_RELEASE": "2"}  # the same config, another deployment: other answers
    ok(record(tmp_path, tmp_path / "rec-2", suite_dir, redeployed, env=release_2))
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    ok(
        replay(
            tmp_path, tmp_path / "first", suite_dir, cassette, "resume=true", f"tracking.tracker.uri={uri}"
        )
    )
    cassette.write_bytes(redeployed.read_bytes())  # the same path, other exchanges
    proc = ok(replay(tmp_path, tmp_path / "second", suite_dir, cassette, "resume=true"))
    assert "skipped:" not in proc.stdout  # not answered by the replay of the earlier content
    first, second = metrics(tmp_path / "first"), metrics(tmp_path / "second")
    assert second["overall"]["RR"] == metrics(tmp_path / "rec-2")["overall"]["RR"] != first["overall"]["RR"]
    for name, found in (("first", first), ("second", second)):
        tags = json.loads((tmp_path / name / "tags.json").read_text())
        assert tags["memeval.cassette_sha256"] == found["system"]["cassette"]["sha256"]
    assert first["system"]["cassette"]["sha256"] != second["system"]["cassette"]["sha256"]
    import mlflow

    (logged,) = mlflow.MlflowClient(tracking_uri=uri).search_runs(
        [e.experiment_id for e in mlflow.MlflowClient(tracking_uri=uri).search_experiments()]
    )
    assert logged.data.tags["memeval.cassette_sha256"] == first["system"]["cassette"]["sha256"]
    again = ok(replay(tmp_path, tmp_path / "third", suite_dir, cassette, "resume=true"))
    assert "skipped:" in again.stdout and str(tmp_path / "second") in again.stdout  # same content: reused


def _rewrite(cassette: Path, number: int, edit) -> None:
    """Edit line `number` (1-based) and give it a correct checksum again, as a careful forger would."""
    from experiments.systems.cassette import _checksum

    lines = cassette.read_text().splitlines(keepends=True)
    entry = json.loads(lines[number - 1])
    edit(entry)
    entry["sha256"] = _checksum(entry)
    lines[number - 1] = json.dumps(entry, sort_keys=True, separators=(",", ":")) + "\n"
    cassette.write_text("".join(lines))


def test_an_edited_line_with_its_checksum_recomputed_or_another_format_is_exit_2_naming_the_line(
    tmp_path, suite_dir
):
    cassette = tmp_path / "c.jsonl"
    ok(record(tmp_path, tmp_path / "rec", suite_dir, cassette))
    original = cassette.read_bytes()
    number = 1 + next(
        i for i, line in enumerate(original.decode().splitlines()) if json.loads(line)["op"] == "search"
    )

    def reverse(entry: dict) -> None:  # the service's answer, in the opposite order
        entry["response"] = entry["response"][::-1]

    _rewrite(cassette, number, reverse)
    proc = replay(tmp_path, tmp_path / "edited", suite_dir, cassette)
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert f"c.jsonl:{number}: cassette line is corrupt (the chain breaks here" in proc.stderr

    cassette.write_bytes(original)
    _rewrite(cassette, 1, lambda entry: entry.update(format="memeval-cassette/1"))
    proc = replay(tmp_path, tmp_path / "old", suite_dir, cassette)
    assert proc.returncode == 2 and "c.jsonl:1: cassette line of format 'memeval-cassette/1'" in proc.stderr


@pytest.mark.parametrize("mode", ["record", "replay"])
@pytest.mark.parametrize("kind", ["fifo", "directory", "device"])
def test_a_cassette_that_is_a_fifo_a_directory_or_a_device_is_refused_at_once(
    tmp_path, suite_dir, mode, kind
):
    path = {"fifo": tmp_path / "c.fifo", "directory": tmp_path / "c.dir", "device": Path("/dev/null")}[kind]
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "directory":
        path.mkdir()
    # A reader that waited on the FIFO would hang: the timeout fails the test instead.
    proc = run(
        tmp_path, tmp_path / "run", suite_dir, f"system.mode={mode}", f"system.cassette={path}", timeout=60
    )
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
    said = {"fifo": "is a FIFO (named pipe)", "directory": "is a directory", "device": "is a device"}[kind]
    assert f"cassette {path} {said}" in proc.stderr
    assert "suite tiny" not in proc.stdout  # refused before any work


def test_a_record_run_with_a_complete_cassette_needs_no_service(tmp_path, suite_dir):
    cassette = tmp_path / "c.jsonl"
    ok(record(tmp_path, tmp_path / "rec", suite_dir, cassette))
    before = cassette.read_bytes()
    ok(record(tmp_path, tmp_path / "again", suite_dir, cassette, "+system.adapter.down=true"))
    assert (tmp_path / "again" / "run.trec").read_bytes() == (tmp_path / "rec" / "run.trec").read_bytes()
    assert cassette.read_bytes() == before
    assert metrics(tmp_path / "again")["system"]["cassette"]["answered_live"] == 0
    # A cassette that lacks something still asks the service, which is checked first: a clear exit 2.
    lines = before.decode().splitlines(keepends=True)
    cassette.write_text("".join(lines[:-1]))  # a prefix: a run killed before its last exchange
    proc = record(tmp_path, tmp_path / "lacking", suite_dir, cassette, "+system.adapter.down=true")
    assert proc.returncode == 2 and "the word-overlap store is down" in proc.stderr


def test_record_latency_is_the_services_and_a_replay_reports_the_recorded_latency(tmp_path, suite_dir):
    cassette = tmp_path / "c.jsonl"
    ok(record(tmp_path, tmp_path / "rec", suite_dir, cassette, "+system.adapter.delay_s=0.02"))
    recorded = {
        e["request"]["query_id"]: e["elapsed_ms"]
        for e in map(json.loads, cassette.read_text().splitlines())
        if e["op"] == "search"
    }
    ok(replay(tmp_path, tmp_path / "replayed", suite_dir, cassette))
    for name in ("rec", "replayed"):
        rows = per_query(tmp_path / name)
        for qid, elapsed in recorded.items():  # the service's own time, not the cassette write's
            assert float(rows[qid]["ms.system"]) == elapsed and elapsed >= 20
    assert metrics(tmp_path / "rec")["system"]["latency_source"] == "measured"
    system = metrics(tmp_path / "replayed")["system"]
    assert system["latency_source"] == "recorded"
    assert "latency is the service's as recorded in the cassette" in " ".join(system["notes"])


@pytest.mark.slow
def test_a_resumed_record_run_against_memeval_serve_restarted_without_its_memories_never_mixes(
    tmp_path, suite_dir
):
    from tests.live.test_live_serve import health, served

    full, cassette = tmp_path / "full.jsonl", tmp_path / "c.jsonl"
    with served("variant=bm25") as (url, _):
        ok(record(tmp_path, tmp_path / "rec", suite_dir, full, url=url))
    lines = full.read_text().splitlines(keepends=True)
    searches = [i for i, line in enumerate(lines) if json.loads(line)["op"] == "search"]
    cassette.write_text("".join(lines[: searches[1] + 1]))  # killed after its second search
    asked = {scope_key(json.loads(lines[i])["request"]["scope"]) for i in searches[2:]}
    with served("variant=bm25") as (url, _):  # restarted with no --state-dir: it holds nothing
        ok(record(tmp_path, tmp_path / "resumed", suite_dir, cassette, url=url))
        counts = health(url)["counts"]
    assert (tmp_path / "resumed" / "run.trec").read_bytes() == (tmp_path / "rec" / "run.trec").read_bytes()
    assert counts["searches"] == len(searches) - 2  # only the missing queries were asked
    assert metrics(tmp_path / "resumed")["system"]["cassette"]["scopes_reingested"] == len(asked)


@pytest.mark.slow
def test_a_complete_record_run_against_memeval_serve_runs_with_the_server_stopped(tmp_path, suite_dir):
    from tests.live.test_live_serve import health, served

    cassette = tmp_path / "c.jsonl"
    with served("variant=bm25") as (url, _):
        ok(record(tmp_path, tmp_path / "rec", suite_dir, cassette, url=url))
    assert health(url) is None  # stopped
    before = cassette.read_bytes()
    ok(record(tmp_path, tmp_path / "again", suite_dir, cassette, url=url))
    assert (tmp_path / "again" / "run.trec").read_bytes() == (tmp_path / "rec" / "run.trec").read_bytes()
    assert cassette.read_bytes() == before


def test_two_runs_recording_into_one_cassette_keep_one_whole_chain(tmp_path):
    """The jobs of a sweep may record into one cassette at once: each appends after what the other wrote."""
    from experiments.systems.cassette import Cassette

    path = tmp_path / "c.jsonl"
    a, b = Cassette(path, writable=True), Cassette(path, writable=True)
    for n in range(3):
        a.put({"key": f"a{n}", "op": "search", "request": {"n": n}, "response": [], "elapsed_ms": 1.0})
        b.put({"key": f"b{n}", "op": "search", "request": {"n": n}, "response": [], "elapsed_ms": 1.0})
    loaded = Cassette(path, writable=False)
    assert set(loaded.entries) == {f"{w}{n}" for w in "ab" for n in range(3)}
    assert loaded.digest is not None and loaded.digest == b.digest  # b wrote last, after a's lines


def test_a_junk_hit_is_judged_for_noise_by_the_text_the_service_returned(tmp_path):
    from dataclasses import replace

    suite = tiny_suite()
    noisy = replace(suite, queries=tuple(replace(q, noise_patterns=("advert",)) for q in suite.queries))
    folder = save_suite(noisy, tmp_path / "noisy")
    ok(run(tmp_path, tmp_path / "run", folder, "+system.adapter.junk=1"))
    rows = per_query(tmp_path / "run")
    # The suite's k is 10 and the store returns its 5 memories after the junk id: "an advert" is 1 of 6.
    assert float(rows["c1:q0"]["noise@10"]) == pytest.approx(1 / 6)
