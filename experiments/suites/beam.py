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
A non-abstention question with no evidence at all, or whose evidence is only messages with no text
once the probe marker is stripped, cannot be scored: it is skipped and said in `notes` (which the run
prints). Everything else that is wrong (`content: null`, evidence ids like `0.0` or `true`, a
conversation folder name with a space...) is a SuiteError naming the file and field; the field rules
are shared with every other loader (experiments/suites/fields.py).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime
from pathlib import Path
from types import MappingProxyType
from typing import Any

from experiments.suites import fields
from experiments.suites.files import read_suite_file, reads_folder
from experiments.suites.granularity import check_granularity
from experiments.suites.options import finish
from experiments.suites.suite import MAX_PROBLEMS, Gathered, Problem, Suite, SuiteError
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
PROBE_MARKER = "->->"


def strip_probe_marker(text: str) -> str:
    # str.partition, not a regex: it runs once per probe question of every conversation loaded.
    return text.partition(PROBE_MARKER)[0].strip()


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


def _numbered(d: Path) -> tuple:
    return (not d.name.isdigit(), int(d.name) if d.name.isdigit() else 0, d.name)


def conversation_dirs(path: str | Path | Sequence[str | Path]) -> list[Path]:
    """A tier folder (numbered conversation folders), one conversation folder, or a list of either."""
    paths = [path] if isinstance(path, (str, Path)) else list(path)
    found: list[Path] = []
    for p in map(Path, paths):
        try:
            chat = p / "chat.json"
            if chat.exists() or chat.is_symlink():  # an unreadable or irregular chat.json: named when read
                found.append(p)
                continue
            if not p.exists():
                raise SuiteError([Problem(str(p), None, None, "BEAM path does not exist")])
            if not p.is_dir():
                raise SuiteError(
                    [
                        Problem(
                            str(p), None, None, "is not a directory (give a BEAM tier or conversation folder)"
                        )
                    ]
                )
            subs = [d for d in p.iterdir() if (d / "chat.json").is_file()]
        except OSError as err:
            raise SuiteError(
                [Problem(str(p), None, None, f"cannot read {p}: {err.strerror or err}")]
            ) from err
        if not subs:
            raise SuiteError(
                [Problem(str(p), None, None, "no BEAM conversation folders (with chat.json) here")]
            )
        found.extend(sorted(subs, key=_numbered))
    return found


_FAILED = object()  # _read_json's answer for a file it could not read (the problem is recorded)


def _read_json(path: Path, problems: list[Problem]) -> Any:
    """The parsed file, or _FAILED with a problem naming the file (and line where JSON has one)."""
    try:
        text = read_suite_file(path).decode("utf-8")
    except FileNotFoundError:
        problems.append(Problem(str(path), None, None, "file is missing"))
        return _FAILED
    except IsADirectoryError:
        problems.append(Problem(str(path), None, None, "is a directory, not a file"))
        return _FAILED
    except OSError as err:
        problems.append(Problem(str(path), None, None, f"cannot read {path}: {err.strerror or err}"))
        return _FAILED
    except UnicodeDecodeError as err:
        problems.append(Problem(str(path), None, None, f"not UTF-8 text ({err.reason} at byte {err.start})"))
        return _FAILED
    try:
        data = fields.json_loads(text)
    except (ValueError, RecursionError) as err:
        problems.extend(
            Problem(str(path), line, where, f"not valid JSON: {message}")
            for line, where, message in fields.json_problems(err, text)
        )
        return _FAILED
    bad_text = [
        Problem(str(path), None, where or None, message) for where, message in fields.surrogates(data)
    ]
    if bad_text:
        problems.extend(bad_text)
        return _FAILED
    return data


def is_plan_group(entry: Any) -> bool:
    """BEAM's 10M chat.json is a list of `{"plan-1": [batch, ...], ...}` entries, not of batches."""
    return isinstance(entry, dict) and bool(entry) and all(str(k).startswith("plan-") for k in entry)


def _batches(chat: list, chat_path: Path, problems: list[Problem]) -> Iterable[tuple[str, int | str, Any]]:
    """(field path, batch number, batch) for every batch of chat.json, in order. A batch inside a
    plan is numbered `<plan>:<batch_number>`, so sessions stay apart if plans restart their numbers."""
    for e, entry in enumerate(chat):
        if not is_plan_group(entry):
            yield f"[{e}]", entry.get("batch_number", e + 1) if isinstance(entry, dict) else e + 1, entry
            continue
        for plan, batches in entry.items():
            if not isinstance(batches, list):
                problems.append(Problem(str(chat_path), None, f"[{e}].{plan}", "must be a list of batches"))
                continue
            for b, batch in enumerate(batches):
                number = batch.get("batch_number", b + 1) if isinstance(batch, dict) else b + 1
                yield f"[{e}].{plan}[{b}]", f"{plan}:{number}", batch


def _messages(
    chat: Any, chat_path: Path, problems: list[Problem]
) -> Iterable[tuple[int | str, str | None, str, Any]]:
    """(batch number, batch time anchor, field path, message) for every message in chat.json."""
    if not isinstance(chat, list):
        problems.append(Problem(str(chat_path), None, None, "must be a list of batches"))
        return
    for at, number, batch in _batches(chat, chat_path, problems):
        turns = batch.get("turns") if isinstance(batch, dict) else None
        if not isinstance(turns, list):
            problems.append(Problem(str(chat_path), None, f"{at}.turns", "missing or not a list"))
            continue
        for t, turn in enumerate(turns):
            for i, message in enumerate(turn if isinstance(turn, list) else [turn]):
                where = f"{at}.turns[{t}][{i}]" if isinstance(turn, list) else f"{at}.turns[{t}]"
                yield number, batch.get("time_anchor"), where, message


def read_topic(folder: Path, problems: list[Problem]) -> dict[str, Any]:
    """The conversation's `topic.json` (category, title, theme, subtopics), JSON-plain for the hash."""
    topic = _read_json(folder / "topic.json", problems)
    if topic is _FAILED:
        return {}
    if not isinstance(topic, dict):
        problems.append(Problem(str(folder / "topic.json"), None, None, "must be an object"))
        return {}
    keep = {k: topic[k] for k in ("category", "title", "theme") if isinstance(topic.get(k), str)}
    keep["subtopics"] = [str(t) for t in topic.get("subtopics") or ()]
    return keep


# Where a probing question keeps its gold answer, by ability (the first one present is taken).
GOLD_FIELDS = ("answer", "ideal_answer", "ideal_response", "ideal_summary")


def _gold(q: dict) -> dict[str, Any]:
    """The answer stage's gold: the question's answer text and its rubric items (BEAM's judge scores each)."""
    answer = next((q[f] for f in GOLD_FIELDS if isinstance(q.get(f), str) and q[f].strip()), None)
    rubric = q.get("rubric")
    items = tuple(r for r in rubric if isinstance(r, str) and r.strip()) if isinstance(rubric, list) else ()
    return {"answer": answer, "rubric": items}


def _is_message_id(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def load_conversation(
    folder: Path, conversation: str, *, topics: bool = False, problems: list[Problem] | None = None
) -> tuple[list[Memory], list[Query], dict, list[str]]:
    """One conversation folder as memories, queries, qrels and notes.

    Problems are appended to `problems` when given (the caller raises once, with all of them);
    without it, a SuiteError is raised here.
    """
    own: list[Problem] = [] if problems is None else problems
    before = len(own)
    chat_path = folder / "chat.json"
    scope = MappingProxyType({"conversation": conversation})
    memories, known, anchor, notes = [], set(), None, []
    empty: set[int] = set()  # messages with no text once the probe marker is stripped
    topic = {"topic": read_topic(folder, own)} if topics else {}
    chat = _read_json(chat_path, own)
    for batch_number, batch_anchor, where, msg in (
        _messages(chat, chat_path, own) if chat is not _FAILED else ()
    ):
        missing = [name for name in ("id", "content", "role") if not isinstance(msg, dict) or name not in msg]
        if missing:
            own.extend(
                Problem(str(chat_path), None, f"message.{name}", f"missing in batch {batch_number} ({where})")
                for name in missing
            )
            continue
        wrong = [
            (name, wants)
            for name, ok, wants in (
                ("id", _is_message_id(msg["id"]), "a message id (an integer >= 0)"),
                ("content", isinstance(msg["content"], str), "a string"),
                ("role", isinstance(msg["role"], str), "a string"),
            )
            if not ok
        ]
        if _is_message_id(msg["id"]):
            known.add(msg["id"])  # evidence naming a bad message is not "unknown" too: one problem, not two
        if wrong:
            own.extend(
                Problem(
                    str(chat_path),
                    None,
                    f"message.{name}",
                    f"must be {wants}, got {msg[name]!r:.60} (batch {batch_number}, {where})",
                )
                for name, wants in wrong
            )
            continue
        anchor = msg.get("time_anchor") or batch_anchor or anchor
        text = strip_probe_marker(msg["content"])
        if not text:
            empty.add(msg["id"])
            continue
        memories.append(
            Memory(
                id=f"{conversation}:{msg['id']}",
                text=text,
                scope=scope,
                role=msg["role"],
                created_at=parse_time_anchor(anchor if isinstance(anchor, str) else None),
                metadata=MappingProxyType(
                    {"time_anchor": anchor, "batch": batch_number, "position": msg["id"], **topic}
                ),
            )
        )
    if empty:
        notes.append(
            f"{conversation}: {len(empty)} message(s) with no text once the probe marker is stripped "
            f"are not indexed: {sorted(empty)[:10]}{' ...' if len(empty) > 10 else ''}"
        )

    questions_path = folder / "probing_questions" / "probing_questions.json"
    probing = _read_json(questions_path, own)
    if probing is not _FAILED and not isinstance(probing, dict):
        own.append(Problem(str(questions_path), None, None, "must map ability -> list of questions"))
    queries, qrels = [], {}
    for ability, questions in probing.items() if isinstance(probing, dict) else ():
        if ability not in ABILITIES:
            own.append(
                Problem(
                    str(questions_path), None, ability, f"unknown ability (known: {', '.join(ABILITIES)})"
                )
            )
            continue
        if not isinstance(questions, list):
            own.append(Problem(str(questions_path), None, ability, "must be a list of questions"))
            continue
        for i, q in enumerate(questions):
            qid, where = f"{conversation}:{ability}:{i}", f"{ability}[{i}]"
            if not isinstance(q, dict) or not isinstance(q.get("question"), str) or not q["question"].strip():
                own.append(Problem(str(questions_path), None, f"{where}.question", "missing or empty"))
                continue
            ids = evidence_ids(q.get("source_chat_ids"))
            # 0.0 == 0 and True == 1 in Python: only true integers name messages.
            not_ids = [x for x in ids if not _is_message_id(x)]
            if not_ids:
                own.append(
                    Problem(
                        str(questions_path),
                        None,
                        f"{where}.source_chat_ids",
                        f"must hold message ids (integers >= 0), got {not_ids[:5]!r:.60}",
                    )
                )
                continue
            unknown = [x for x in ids if x not in known]
            if unknown:
                own.append(
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
            judged = {f"{conversation}:{x}": 1 for x in ids if x not in empty}
            if ability != "abstention" and not judged:
                notes.append(
                    f"{qid}: its evidence {ids} is only messages with no text once the probe marker is "
                    f"stripped; skipped (cannot be scored)"
                )
                continue
            if len(judged) < len(ids):
                dropped = [x for x in ids if x in empty]
                notes.append(
                    f"{qid}: evidence {dropped} has no text once the probe marker is stripped; not judged"
                )
            labels = {"ability": ability}
            if isinstance(q.get("difficulty"), str):
                labels["difficulty"] = q["difficulty"]
            queries.append(
                Query(
                    id=qid,
                    text=q["question"].strip(),
                    scope=scope,
                    labels=MappingProxyType(labels),
                    now=parse_time_anchor(anchor if isinstance(anchor, str) else None),
                    **_gold(q),
                )
            )
            if judged:
                qrels[qid] = judged
    if problems is None and len(own) > before:
        raise SuiteError(own[:MAX_PROBLEMS])
    return memories, queries, qrels, notes


@reads_folder
def load_beam(
    path: str | Path | Sequence[str | Path],
    *,
    name: str = "beam",
    k: int = 10,
    topics: bool = False,
    granularity: str = "turn",
    errata: str | None = None,
) -> Suite:
    """Load BEAM conversations (a tier folder such as `../shared/beam/100K`, or a list of folders).

    Every conversation is read and checked before anything is returned; all problems (up to
    MAX_PROBLEMS) are raised together. `topics=True` adds each conversation's topic.json to its
    messages as `metadata.topic` (for the topic_tags stage); off by default, so the default suite
    and its content hash are unchanged.
    """
    check_granularity(granularity)
    gathered, problems = Gathered(), []
    read: list[tuple[str, Path]] = []  # (release path, file) of every file read: the dataset's identity
    for folder in conversation_dirs(path):
        if len(problems) >= MAX_PROBLEMS:
            break
        conversation = f"{folder.parent.name}/{folder.name}"
        if (problem := fields.id_problem(conversation)) is not None:
            problems.append(Problem(str(folder), None, "conversation (folder name)", problem))
            continue
        gathered.add(*load_conversation(folder, conversation, topics=topics, problems=problems))
        read += [
            (f"{conversation}/{name}", folder / name)
            for name in ("chat.json", "probing_questions/probing_questions.json", *(("topic.json",) * topics))
        ]
    # Sessions are chat.json's batches; rounds its turns (a user message and its reply).
    return finish(
        gathered.suite(
            name,
            problems=problems,
            k=k,
            description=f"BEAM from {path}",
            label_names=tuple(dict.fromkeys(label for q in gathered.queries for label in q.labels)),
            notes=tuple(gathered.notes),
        ),
        granularity=granularity,
        session_of=lambda m: f"{m.scope['conversation']}:b{m.metadata['batch']}",
        errata=errata,
        files=read,
    )
