"""LoCoMo (Maharana et al., ACL 2024) read from its own `locomo10.json` (or a file in its schema), as a Suite.

Upstream: snap-research/LoCoMo, `data/locomo10.json`, a JSON list of samples. Mapping:
- one memory per turn, id `<sample_id>:<dia_id>` (`conv-26:D1:3`), text as upstream's evaluation code
  renders a turn: `<speaker> said, "<text>"`, plus ` and shared <caption>` when it shares an image;
  role = the speaker's name; `created_at` = the session's date-time (`1:56 pm on 8 May, 2023` ->
  `2023-05-08T13:56:00`); metadata: session number, dia_id, the raw date-time;
- one scope per conversation `{"conversation": "<sample_id>"}`;
- a query per `qa` entry, id `<sample_id>:q<index in qa>`, its `now` the last session's date-time;
  `category` label by name: 1 multi-hop, 2 temporal, 3 open-domain, 4 single-hop, 5 adversarial (the
  numbering is undocumented upstream, locomo#29; this is how the benchmark is commonly read);
- evidence = the `evidence` dia_ids with grade 1.

`protocol` says whose conventions score the suite (docs/benchmarks.md tables them side by side):
- `official` (default) reproduces upstream's evaluation code (task_eval/evaluation.py:228-237): every
  category is scored (1-5, the adversarial ones too), and R@k is upstream's recall over the raw evidence list
  (experiments/evaluate/metrics/official_locomo.py): a malformed or unknown id is a miss that still counts,
  a question with no evidence scores 1, at session granularity each evidence id counts (not each session).
  Upstream retrieves turns or sessions, so `round` granularity and errata (which upstream has not) are
  refused: they are memeval's;
- `memeval` scores categories 1-4 by default (`categories` chooses), and only the evidence that names a turn:
  a string holding several ids (`D8:6; D9:17`) is split, a malformed id (`D`, `D:11:26`) and the id of a
  turn that does not exist are dropped, and a question left with no evidence is skipped (it cannot be scored).

Either way the evidence is audited, never dropped silently: each kind is counted, with examples, in
`notes`, and the counts are the `evidence_audit` tag (JSON). Structural problems (not a list, a turn without
text, an unknown category...) are a SuiteError naming file and field. The categories not scored are still
read and checked, and their count is said in `notes`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from types import MappingProxyType
from typing import Any

from experiments.evaluate.metrics.official_locomo import LocomoScorer
from experiments.suites import fields
from experiments.suites.beam import _FAILED, _read_json
from experiments.suites.granularity import check_granularity
from experiments.suites.options import check_protocol, finish
from experiments.suites.suite import MAX_PROBLEMS, Gathered, Problem, Suite, SuiteError
from retrieval.types import Memory, Query

# Category 5's gold: upstream asks it as a two-option question whose right option is this text, and
# its scorer accepts an answer that says "not mentioned" (task_eval/evaluation.py).
NOT_MENTIONED = "Not mentioned in the conversation"


def _gold(q: dict, category: int) -> dict[str, str]:
    """The answer stage's gold for a qa entry (an integer answer, `2022`, as text); category 5 keeps its
    distractor (`adversarial_answer`) apart from the gold, which is "not mentioned"."""
    if category == 5:
        distractor = q.get("adversarial_answer")
        kept = {} if distractor is None else {"adversarial_answer": str(distractor)}
        return {"answer": NOT_MENTIONED, **kept}
    answer = q.get("answer")
    return {} if answer is None or isinstance(answer, bool | dict | list) else {"answer": str(answer)}


CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop", 5: "adversarial"}
DIA_ID = re.compile(r"D(?P<session>[0-9]+):(?P<turn>[0-9]+)")
_SESSION_KEY = re.compile(r"session_(?P<n>[0-9]+)")


def parse_date_time(value: Any) -> str | None:
    """`1:56 pm on 8 May, 2023` -> `2023-05-08T13:56:00`; anything else -> None (kept raw in metadata)."""
    if not isinstance(value, str):
        return None
    for fmt in ("%I:%M %p on %d %B, %Y", "%I:%M %p on %d %b, %Y"):
        try:
            return datetime.strptime(value.strip(), fmt).isoformat()
        except ValueError:
            pass
    return None


def split_evidence(value: str) -> list[str]:
    """One evidence string as the ids it holds: `D8:6; D9:17` -> [`D8:6`, `D9:17`]; `D1:3` -> [`D1:3`]."""
    return [part.strip() for part in re.split(r"[;,]", value) if part.strip()]


@dataclass
class EvidenceAudit:
    """What was wrong with the evidence ids of a LoCoMo file (every question, whatever its category)."""

    split: list[str] = field(default_factory=list)  # `<qid> '<string>'`: strings holding several ids
    malformed: list[str] = field(default_factory=list)  # ids that are not `D<session>:<turn>`
    unknown: list[str] = field(default_factory=list)  # well-formed ids of turns that do not exist
    no_evidence: list[str] = field(default_factory=list)  # questions with an empty evidence list

    def counts(self) -> dict[str, int]:
        return {k: len(v) for k, v in vars(self).items()}

    def note(self) -> str:
        def some(items: list[str]) -> str:
            return f" ({'; '.join(items[:10])}{' ...' if len(items) > 10 else ''})" if items else ""

        return (
            f"LoCoMo evidence: {len(self.split)} string(s) holding several ids, split{some(self.split)}; "
            f"{len(self.malformed)} malformed id(s) dropped{some(self.malformed)}; "
            f"{len(self.unknown)} id(s) of turns that do not exist dropped{some(self.unknown)}; "
            f"{len(self.no_evidence)} question(s) with no evidence{some(self.no_evidence)}"
        )


def _sessions(conversation: dict) -> list[tuple[int, list]]:
    found = [(int(m["n"]), v) for k, v in conversation.items() if (m := _SESSION_KEY.fullmatch(k))]
    return sorted(found, key=lambda item: item[0])


def _turn_text(turn: dict) -> str:
    """Upstream's own rendering of a turn (task_eval: `<speaker> said, "<text>" and shared <caption>`): the
    speaker's name is part of what a question asks about ("When did Caroline ...")."""
    text = f'{turn["speaker"]} said, "{turn["text"].strip()}"'
    caption = turn.get("blip_caption")
    return f"{text} and shared {caption.strip()}" if isinstance(caption, str) and caption.strip() else text


def _read_sample(
    sample: Any,
    i: int,
    path: str,
    categories: frozenset[int],
    audit: EvidenceAudit,
    problems: list[Problem],
    raw_evidence: dict[str, tuple[str, ...]] | None,
) -> tuple[list[Memory], list[Query], dict, list[str]]:
    """A sample's memories, queries, qrels and notes; `raw_evidence` (protocol=official) collects each
    scored question's evidence list as the file has it; then a question with no usable evidence is kept."""
    where = f"[{i}]"
    if not isinstance(sample, dict):
        problems.append(Problem(path, None, where, "a sample must be an object"))
        return [], [], {}, []
    sid = sample.get("sample_id")
    if (problem := fields.id_problem(sid)) is not None:
        problems.append(Problem(path, None, f"{where}.sample_id", problem))
        return [], [], {}, []
    conversation, qa = sample.get("conversation"), sample.get("qa")
    if not isinstance(conversation, dict) or not isinstance(qa, list):
        problems.append(
            Problem(
                path, None, f"{where}.conversation / qa", "a sample has a conversation object and a qa list"
            )
        )
        return [], [], {}, []
    scope = MappingProxyType({"conversation": sid})
    memories: list[Memory] = []
    known: set[str] = set()
    last_time: str | None = None
    for n, turns in _sessions(conversation):
        raw_time = conversation.get(f"session_{n}_date_time")
        created = parse_date_time(raw_time)
        if created is None:
            problems.append(
                Problem(
                    path,
                    None,
                    f"{where}.conversation.session_{n}_date_time",
                    f"not a LoCoMo date-time: {raw_time!r:.60}",
                )
            )
        last_time = created or last_time
        if not isinstance(turns, list):
            problems.append(
                Problem(path, None, f"{where}.conversation.session_{n}", "must be a list of turns")
            )
            continue
        for t, turn in enumerate(turns):
            at = f"{where}.conversation.session_{n}[{t}]"
            if not isinstance(turn, dict):
                problems.append(Problem(path, None, at, "a turn must be an object"))
                continue
            wrong = [k for k in ("speaker", "dia_id", "text") if not isinstance(turn.get(k), str)]
            if wrong:
                problems.extend(Problem(path, None, f"{at}.{k}", "missing or not a string") for k in wrong)
                continue
            match = DIA_ID.fullmatch(turn["dia_id"])
            if match is None or int(match["session"]) != n:
                problems.append(
                    Problem(path, None, f"{at}.dia_id", f"must be D{n}:<turn>, got {turn['dia_id']!r:.40}")
                )
                continue
            known.add(turn["dia_id"])
            memories.append(
                Memory(
                    id=f"{sid}:{turn['dia_id']}",
                    text=_turn_text(turn),
                    scope=scope,
                    role=turn["speaker"],
                    created_at=created,
                    metadata=MappingProxyType(
                        {"session": n, "dia_id": turn["dia_id"], "date_time": raw_time}
                    ),
                )
            )
    queries, qrels, notes = [], {}, []
    left_out: dict[int, int] = {}
    for j, q in enumerate(qa):
        qid, at = f"{sid}:q{j}", f"{where}.qa[{j}]"
        if not isinstance(q, dict) or not isinstance(q.get("question"), str) or not q["question"].strip():
            problems.append(Problem(path, None, f"{at}.question", "missing or empty"))
            continue
        category = q.get("category")
        if category not in CATEGORIES or isinstance(category, bool):
            problems.append(
                Problem(path, None, f"{at}.category", f"must be one of 1-5, got {category!r:.20}")
            )
            continue
        evidence = q.get("evidence")
        if not isinstance(evidence, list) or not all(isinstance(e, str) for e in evidence):
            problems.append(Problem(path, None, f"{at}.evidence", "must be a list of dia_id strings"))
            continue
        ids: list[str] = []
        for value in evidence:
            parts = split_evidence(value)
            if len(parts) != 1:
                audit.split.append(f"{qid} {value!r}")
            for part in parts or [value]:
                if DIA_ID.fullmatch(part) is None:
                    audit.malformed.append(f"{qid} {part!r}")
                elif part not in known:
                    audit.unknown.append(f"{qid} {part!r}")
                else:
                    ids.append(part)
        if not evidence:
            audit.no_evidence.append(qid)
        if category not in categories:
            left_out[category] = left_out.get(category, 0) + 1
            continue
        if not ids and raw_evidence is None:
            notes.append(f"{qid}: no usable evidence ({evidence!r:.60}); skipped (cannot be scored)")
            continue
        if raw_evidence is not None:
            raw_evidence[qid] = tuple(evidence)
        queries.append(
            Query(
                id=qid,
                text=q["question"].strip(),
                scope=scope,
                labels=MappingProxyType({"category": CATEGORIES[category]}),
                now=last_time,
                **_gold(q, category),
            )
        )
        if ids:
            qrels[qid] = {f"{sid}:{x}": 1 for x in ids}
    for category, count in sorted(left_out.items()):
        notes.append(
            f"{sid}: {count} category-{category} ({CATEGORIES[category]}) question(s) read but not scored "
            f"(suite.categories={sorted(categories)})"
        )
    return memories, queries, qrels, notes


def load_locomo(
    path: str | Path,
    *,
    name: str = "locomo",
    k: int = 10,
    categories: Sequence[int] | None = None,
    granularity: str = "turn",
    errata: str | None = None,
    protocol: str = "official",
) -> Suite:
    """A LoCoMo file (`locomo10.json` or a cut of it) as a suite of the chosen categories and granularity,
    scored by upstream's conventions (`protocol=official`) or memeval's (`memeval`); `categories` defaults to
    what the protocol scores: 1-5 (official), 1-4 (memeval)."""
    check_granularity(granularity)
    check_protocol(protocol, granularity, errata)
    official = protocol == "official"
    if categories is None:
        categories = tuple(CATEGORIES) if official else (1, 2, 3, 4)
    wrong = [c for c in categories if c not in CATEGORIES or isinstance(c, bool)]
    if wrong or not categories:
        raise SuiteError(
            [
                Problem(
                    "suite config",
                    None,
                    "suite.categories",
                    f"must be a non-empty list of 1-5, got {list(categories)}",
                )
            ]
        )
    path = Path(path)
    problems: list[Problem] = []
    data = _read_json(path, problems)
    if data is not _FAILED and not isinstance(data, list):
        problems.append(
            Problem(str(path), None, None, "must be a JSON list of samples (LoCoMo's locomo10.json)")
        )
    if problems:
        raise SuiteError(problems[:MAX_PROBLEMS])
    gathered = Gathered()
    audit = EvidenceAudit()
    raw_evidence: dict[str, tuple[str, ...]] | None = {} if official else None
    for i, sample in enumerate(data):
        gathered.add(
            *_read_sample(sample, i, str(path), frozenset(categories), audit, problems, raw_evidence)
        )
    scorer, scorer_note = None, ""
    if raw_evidence is not None:
        by_session = granularity == "session"
        unit = {
            (f"{m.scope['conversation']}:D{m.metadata['session']}" if by_session else m.id): (
                str(m.metadata["session"]) if by_session else m.metadata["dia_id"]
            )
            for m in gathered.memories
        }
        scorer = LocomoScorer(evidence=raw_evidence, unit=unit, by_session=by_session)
        scorer_note = (
            f"protocol=official: {len(raw_evidence)} questions scored as upstream; R@k is its recall over "
            "each raw evidence list (a malformed or unknown id is a miss that counts, no evidence "
            "scores 1, at session granularity each id counts); the other metrics read the qrels, where "
            "those ids are dropped"
        )
    return finish(
        gathered.suite(
            name,
            problems=problems,
            scorer=scorer,
            scorer_note=scorer_note,
            k=k,
            description=f"LoCoMo from {path}",
            label_names=("category",) if gathered.queries else (),
            notes=(audit.note(), *gathered.notes),
            tags={
                "evidence_audit": json.dumps(audit.counts()),
                "categories": ",".join(map(str, sorted(categories))),
                "protocol": protocol,
            },
        ),
        granularity=granularity,
        session_of=lambda m: f"{m.scope['conversation']}:D{m.metadata['session']}",
        errata=errata,
        files=[(path.name, path)],
    )


def raw_texts(path: str | Path) -> tuple[dict[str, str], dict[str, str]]:
    """A LoCoMo file's raw turn texts by memory id and raw questions by query id, as upstream's answer prompt
    reads them (unstripped, without the image caption a memory's text appends). Only the answer stage reads
    them, under `official`: the suite's memories and queries, and so its content hash, stay as they are."""
    problems: list[Problem] = []
    data = _read_json(Path(path), problems)
    if problems:
        raise SuiteError(problems)
    turns: dict[str, str] = {}
    questions: dict[str, str] = {}
    for sample in data:
        sid = sample["sample_id"]
        for value in sample["conversation"].values():
            if isinstance(value, list):
                turns.update((f"{sid}:{t['dia_id']}", t["text"]) for t in value)
        questions.update((f"{sid}:q{j}", qa["question"]) for j, qa in enumerate(sample["qa"]))
    return turns, questions
