"""The BEAM benchmark read from its own folder layout, as a Suite.

BEAM (Tavakoli et al., 2025) has, per conversation, `chat.json` (batches of turns of messages)
and `probing_questions/probing_questions.json` (questions per ability, with evidence message ids in
`source_chat_ids`). Mapping:
- one memory per message, id `<tier>/<conversation>:<message id>`, text = content with the trailing
  probe marker (`->-> 1,25` and its irregular forms) stripped; the message's `index` and
  `question_type` fields never reach the text (they would hand a retriever the answer's position);
- each conversation is its own scope `{"conversation": "<tier>/<n>"}`;
- role and time anchor kept (time anchor as `created_at`, ISO date; carried forward within a
  conversation when a message has none), conversation order as `metadata.position`;
- evidence from `source_chat_ids` in all its shapes (list, nested lists, dict of lists) with grade 1;
- the ten abilities as the `ability` label; abstention questions kept, with no relevant memory.
A non-abstention question with no evidence at all cannot be scored: it is skipped and said in `notes`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from datetime import datetime
from pathlib import Path
from types import MappingProxyType
from typing import Any

from experiments.suites.suite import Problem, Suite, SuiteError, check_suite
from retrieval.types import Memory, Query

ABILITIES = (
    "abstention",
    "contradiction_resolution",
    "event_ordering",
    "information_extraction",
    "instruction_following",
    "knowledge_update",
    "multi_session_reasoning",
    "preference_following",
    "summarization",
    "temporal_reasoning",
)
# Everything from the probe marker to the end of the message is leaked generation metadata.
PROBE_MARKER = re.compile(r"\s*->->.*\Z", re.DOTALL)


def strip_probe_marker(text: str) -> str:
    return PROBE_MARKER.sub("", text).strip()


def parse_time_anchor(anchor: str | None) -> str | None:
    """`March-15-2024` -> `2024-03-15`; anything else unparseable -> None (kept raw in metadata)."""
    if not anchor:
        return None
    for fmt in ("%B-%d-%Y", "%b-%d-%Y"):
        try:
            return datetime.strptime(anchor.strip(), fmt).date().isoformat()
        except ValueError:
            pass
    return None


def evidence_ids(source: Any) -> list[int]:
    """Flatten `source_chat_ids` in any of BEAM's shapes into message ids, in order, deduplicated."""
    out: list[int] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)
        elif node is not None:
            out.append(node)

    walk(source)
    return list(dict.fromkeys(out))


def conversation_dirs(path: str | Path | Sequence[str | Path]) -> list[Path]:
    """A tier folder (numbered conversation folders), one conversation folder, or a list of either."""
    paths = [path] if isinstance(path, (str, Path)) else list(path)
    found: list[Path] = []
    for p in map(Path, paths):
        if (p / "chat.json").is_file():
            found.append(p)
        elif p.is_dir():
            subs = [d for d in p.iterdir() if (d / "chat.json").is_file()]
            if not subs:
                raise SuiteError(
                    [Problem(str(p), None, None, "no BEAM conversation folders (with chat.json) here")]
                )
            found.extend(
                sorted(
                    subs, key=lambda d: (not d.name.isdigit(), int(d.name) if d.name.isdigit() else 0, d.name)
                )
            )
        else:
            raise SuiteError([Problem(str(p), None, None, "BEAM path does not exist")])
    return found


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text("utf-8"))
    except FileNotFoundError as err:
        raise SuiteError([Problem(str(path), None, None, "file is missing")]) from err
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        line = getattr(err, "lineno", None)
        raise SuiteError([Problem(str(path), line, None, f"not valid JSON: {err}")]) from err


def _messages(chat: Any, chat_path: Path) -> Iterable[tuple[int, str | None, dict]]:
    if not isinstance(chat, list):
        raise SuiteError([Problem(str(chat_path), None, None, "must be a list of batches")])
    for b, batch in enumerate(chat):
        turns = batch.get("turns") if isinstance(batch, dict) else None
        if not isinstance(turns, list):
            raise SuiteError([Problem(str(chat_path), None, f"[{b}].turns", "missing or not a list")])
        for turn in turns:
            for message in turn if isinstance(turn, list) else [turn]:
                yield batch.get("batch_number", b + 1), batch.get("time_anchor"), message


def read_topic(folder: Path) -> dict[str, Any]:
    """The conversation's `topic.json` (category, title, theme, subtopics), JSON-plain for the hash."""
    topic = _read_json(folder / "topic.json")
    if not isinstance(topic, dict):
        raise SuiteError([Problem(str(folder / "topic.json"), None, None, "must be an object")])
    keep = {k: topic[k] for k in ("category", "title", "theme") if isinstance(topic.get(k), str)}
    keep["subtopics"] = [str(t) for t in topic.get("subtopics") or ()]
    return keep


def load_conversation(
    folder: Path, conversation: str, *, topics: bool = False
) -> tuple[list[Memory], list[Query], dict, list[str]]:
    chat_path = folder / "chat.json"
    scope = MappingProxyType({"conversation": conversation})
    memories, known, anchor = [], set(), None
    topic = {"topic": read_topic(folder)} if topics else {}
    for batch_number, batch_anchor, msg in _messages(_read_json(chat_path), chat_path):
        for name in ("id", "content", "role"):
            if not isinstance(msg, dict) or name not in msg:
                raise SuiteError(
                    [Problem(str(chat_path), None, f"message.{name}", f"missing in batch {batch_number}")]
                )
        anchor = msg.get("time_anchor") or batch_anchor or anchor
        text = strip_probe_marker(str(msg["content"]))
        known.add(msg["id"])
        if not text:
            continue
        memories.append(
            Memory(
                id=f"{conversation}:{msg['id']}",
                text=text,
                scope=scope,
                role=msg["role"],
                created_at=parse_time_anchor(anchor),
                metadata=MappingProxyType(
                    {"time_anchor": anchor, "batch": batch_number, "position": msg["id"], **topic}
                ),
            )
        )
    kept = {m.id for m in memories}

    questions_path = folder / "probing_questions" / "probing_questions.json"
    probing = _read_json(questions_path)
    if not isinstance(probing, dict):
        raise SuiteError([Problem(str(questions_path), None, None, "must map ability -> list of questions")])
    queries, qrels, notes, problems = [], {}, [], []
    for ability, questions in probing.items():
        if ability not in ABILITIES:
            problems.append(
                Problem(
                    str(questions_path), None, ability, f"unknown ability (known: {', '.join(ABILITIES)})"
                )
            )
            continue
        for i, q in enumerate(questions):
            qid, where = f"{conversation}:{ability}:{i}", f"{ability}[{i}]"
            if not isinstance(q, dict) or not isinstance(q.get("question"), str) or not q["question"].strip():
                problems.append(Problem(str(questions_path), None, f"{where}.question", "missing or empty"))
                continue
            ids = evidence_ids(q.get("source_chat_ids"))
            unknown = [x for x in ids if x not in known]
            if unknown:
                problems.append(
                    Problem(
                        str(questions_path),
                        None,
                        f"{where}.source_chat_ids",
                        f"names messages not in chat.json: {unknown}",
                    )
                )
                continue
            if ability != "abstention" and not ids:
                notes.append(f"{qid}: no source_chat_ids on a {ability} question; skipped (cannot be scored)")
                continue
            labels = {"ability": ability}
            if isinstance(q.get("difficulty"), str):
                labels["difficulty"] = q["difficulty"]
            queries.append(
                Query(
                    id=qid,
                    text=q["question"].strip(),
                    scope=scope,
                    labels=MappingProxyType(labels),
                    now=parse_time_anchor(anchor),
                )
            )
            judged = {f"{conversation}:{x}": 1 for x in ids if f"{conversation}:{x}" in kept}
            if judged:
                qrels[qid] = judged
    if problems:
        raise SuiteError(problems)
    return memories, queries, qrels, notes


def load_beam(
    path: str | Path | Sequence[str | Path], *, name: str = "beam", k: int = 10, topics: bool = False
) -> Suite:
    """Load BEAM conversations (a tier folder such as `../shared/beam/100K`, or a list of folders).

    `topics=True` adds each conversation's topic.json to its messages as `metadata.topic` (for the
    topic_tags stage); off by default, so the default suite and its content hash are unchanged.
    """
    memories, queries, qrels, notes = [], [], {}, []
    for folder in conversation_dirs(path):
        conversation = f"{folder.parent.name}/{folder.name}"
        m, q, r, n = load_conversation(folder, conversation, topics=topics)
        memories += m
        queries += q
        qrels.update(r)
        notes += n
    suite = Suite(
        name=name,
        memories=tuple(memories),
        queries=tuple(queries),
        qrels=qrels,
        k=k,
        description=f"BEAM from {path}",
        label_names=("ability",),
        notes=tuple(notes),
    )
    check_suite(suite)
    return suite
