"""beam_scale writes BEAM-shaped suites at BEAM's message length and tier sizes, streamed, and the BEAM
loader reads them (10M's plan-grouped chat.json included) the way it reads the real tiers."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import tracemalloc
from pathlib import Path

import pytest

from experiments.suites.beam import ABILITIES, load_beam
from experiments.suites.generators import beam_scale, beam_synth


def _digest(folder: Path) -> str:
    h = hashlib.sha256()
    for f in sorted(folder.rglob("*.json")):
        h.update(str(f.relative_to(folder)).encode() + b"\0" + f.read_bytes())
    return h.hexdigest()


def test_the_same_seed_writes_the_same_bytes_and_another_seed_does_not(tmp_path):
    one = beam_scale.generate(tmp_path / "a", "10M", 2, seed=4, messages=300)[0].parent
    two = beam_scale.generate(tmp_path / "b", "10M", 2, seed=4, messages=300)[0].parent
    other = beam_scale.generate(tmp_path / "c", "10M", 2, seed=5, messages=300)[0].parent
    assert _digest(one) == _digest(two)
    assert _digest(one) != _digest(other)


def test_beam_synth_writes_what_it_wrote_before_the_pad_and_plan_hooks(tmp_path):
    # Pinned from main (e5a3e3f) before beam_scale existed: beam_synth's suites must not move.
    beam_synth.generate(tmp_path, 2, 300, 3)
    assert _digest(tmp_path) == "f0e8a7704b3f4a833852ec8296fa329947abc13a750267187bacbdc29c8365ba"


def test_a_10m_shaped_conversation_is_grouped_in_plans_and_loads_with_every_ability(tmp_path):
    folders = beam_scale.generate(tmp_path, "10M", 2, seed=0, messages=2_000)
    chat = json.loads((folders[0] / "chat.json").read_text("utf-8"))
    assert [list(entry) for entry in chat] == [[f"plan-{p}"] for p in range(1, beam_scale.PLANS["10M"] + 1)]
    suite = load_beam(tmp_path)
    assert len(suite.memories) == 2 * 2_000 and not suite.notes
    assert len({m.id for m in suite.memories}) == len(suite.memories)  # ids unique across plans
    # sessions (batches) keep their plan, so a plan that restarted its numbering would stay apart
    assert suite.memories[0].metadata["batch"] == "plan-1:1"
    abilities = [q.labels["ability"] for q in suite.queries]
    assert sorted(set(abilities)) == sorted(ABILITIES) and len(abilities) == 2 * 10 * 2
    texts = {m.id: m.text for m in suite.memories}
    for q in suite.queries:  # gold evidence names messages that exist, in the question's conversation
        for memory_id in suite.qrels.get(q.id, {}):
            assert memory_id in texts and memory_id.split(":")[0] == q.scope["conversation"]


def test_messages_are_as_long_as_beams_and_hold_no_abstention_term(tmp_path):
    # BEAM 100K means (beam_scale.MEAN_WORDS come from measure_lengths on it): 69 user, 569 assistant.
    beam_scale.generate(tmp_path, "1M", 1, seed=1, messages=1_200)
    means = beam_scale.measure_lengths(tmp_path)
    for role, mean in beam_scale.MEAN_WORDS.items():
        assert abs(means[role] - mean) / mean < 0.1, (role, means[role])
    text = (tmp_path / "1" / "chat.json").read_text("utf-8").lower()
    assert not [term for terms in beam_synth.ABSENT_TERMS for term in terms if term in text]


def test_mean_words_are_beam_100ks(beam_100k):
    measured = beam_scale.measure_lengths(beam_100k)
    assert {role: round(measured[role]) for role in beam_scale.MEAN_WORDS} == beam_scale.MEAN_WORDS


def test_generation_is_streamed_memory_does_not_grow_with_the_conversation(tmp_path):
    peaks = []
    for n in (400, 3_200):
        tracemalloc.start()
        beam_scale.generate(tmp_path / str(n), "1M", 1, seed=0, messages=n)
        peaks.append(tracemalloc.get_traced_memory()[1])
        tracemalloc.stop()
    # 8x the messages: the text in memory is one batch either way (the layout's few integers per turn
    # are all that grows); a generator holding the conversation would need ~8x.
    assert peaks[1] < 1.5 * peaks[0], peaks


def test_the_command_has_help_and_refuses_a_bad_tier_with_exit_2(tmp_path):
    module = "experiments.suites.generators.beam_scale"
    shown = subprocess.run([sys.executable, "-m", module, "--help"], capture_output=True, text=True)
    assert shown.returncode == 0 and "--tier" in shown.stdout and "10M" in shown.stdout
    bad = subprocess.run(
        [sys.executable, "-m", module, str(tmp_path), "--tier", "3M"], capture_output=True, text=True
    )
    assert bad.returncode == 2 and "3M" in bad.stderr
    assert (
        beam_scale.main([str(tmp_path / "s"), "--tier", "100K", "--conversations", "1", "--messages", "200"])
        == 0
    )
    assert (tmp_path / "s" / "1" / "chat.json").is_file()
    with pytest.raises(ValueError, match="questions_per_ability"):
        beam_scale.generate(
            tmp_path / "q", "100K", 1, questions_per_ability=beam_synth.MAX_QUESTIONS_PER_ABILITY + 1
        )


def test_beam_100k_loads_to_the_same_suite_as_before_the_plan_reader(beam_100k):
    # Content hashes pinned from main (e5a3e3f)'s loader, before it learned 10M's plan layout.
    assert (
        load_beam(beam_100k).content_hash
        == "f5a70ee2582aa0e9691fffbe72cf96a8d5abe3b5a5971d166104ccda73d0440a"
    )
    topical = load_beam(beam_100k, topics=True, granularity="session")
    assert topical.content_hash == "dfdbd792a093a4c75981bc3de5ab198a43e893bdc776a9765431de643664d482"


def test_a_plan_that_is_not_a_list_of_batches_is_named(tmp_path):
    folder = beam_scale.generate(tmp_path, "10M", 1, seed=0, messages=400)[0]
    chat = json.loads((folder / "chat.json").read_text("utf-8"))
    chat[1]["plan-2"] = {"turns": []}
    (folder / "chat.json").write_text(json.dumps(chat), "utf-8")
    with pytest.raises(ValueError, match=r"chat\.json: \[1\]\.plan-2: must be a list of batches"):
        load_beam(tmp_path)


def test_the_loader_holds_one_conversation_at_a_time(tmp_path):
    # What loading needs beyond the suite it returns (the parsed chat.json, its text) is one
    # conversation's worth, however many conversations the tier holds.
    beam_scale.generate(tmp_path, "1M", 4, seed=0, messages=600)
    transient = []
    for folders in ([tmp_path / "1"], [tmp_path / str(n) for n in range(1, 5)]):
        tracemalloc.start()
        suite = load_beam(folders)
        kept, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        transient.append(peak - kept)
        del suite
    assert transient[1] < 1.5 * transient[0], transient  # four conversations held at once: ~4x
