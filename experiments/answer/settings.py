"""The `answer` config group, read and checked as a whole before any call (docs/answers.md).

    answer=llm    answer.endpoint.base_url=... answer.model=... answer.judges=[lexical]
    answer=file   answer.path=answers.jsonl answer.judges=[lexical]

Every problem is named by its key at once (a ConfigError, exit 2): no endpoint is asked, no suite read
twice. A key that is not one of these is refused, so a typo (`answer.contex=gold`) never runs silently
with the default.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from experiments.answer.calls import MODES
from experiments.answer.client import ChatEndpoint
from experiments.systems import bounded

SOURCES = ("llm", "file")
CONTEXTS = ("retrieved", "gold", "random", "none")
ENDPOINT_KEYS = frozenset(ChatEndpoint.__dataclass_fields__) - {"_local"} | {"model_file"}
KEYS = frozenset(
    {
        "source", "path", "endpoint", "model", "temperature", "seed", "max_tokens", "k", "context",
        "template", "window_tokens", "chars_per_token", "concurrency", "judges", "judge_endpoint",
        "judge_model", "mode", "cassette", "protocol", "labels", "sample",
    }
)  # fmt: skip


@dataclass(frozen=True)
class JudgeSpec:
    """One entry of `answer.judges`: a judge's name and its options (prompt_set, ...)."""

    name: str
    options: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class AnswerSettings:
    source: str
    path: str | None
    endpoint: ChatEndpoint | None
    model_file: str | None
    model: str | None
    temperature: float
    seed: int
    max_tokens: int
    k: int
    contexts: tuple[str, ...]  # the first is the run's answer; the others are compared with it
    template: str | None
    window_tokens: int | None
    chars_per_token: float
    concurrency: int
    judges: tuple[JudgeSpec, ...]
    judge_endpoint: ChatEndpoint | None
    judge_model: str | None
    mode: str
    cassette: str | None
    protocol: str
    labels: str | None
    sample: int | None = None  # answer a seeded sample of this many questions (the rest counted, not asked)

    @property
    def sampling(self) -> dict[str, Any]:
        return {"temperature": self.temperature, "seed": self.seed, "max_tokens": self.max_tokens}


def _int(node: Mapping[str, Any], key: str, problems: list[str], *, low: int, default: Any = None) -> Any:
    value = node.get(key, default)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        problems.append(f"answer.{key}: must be an integer >= {low}, got {value!r:.40}")
        return None
    return value


def _endpoint(node: Any, where: str, problems: list[str]) -> tuple[ChatEndpoint | None, str | None]:
    if not isinstance(node, Mapping):
        problems.append(f"{where}: must be a mapping (base_url, api_key_env, timeout_s, retries...)")
        return None, None
    unknown = sorted(set(node) - ENDPOINT_KEYS)
    if unknown:
        problems.append(
            f"{where}: unknown key(s) {', '.join(unknown)} (known: {', '.join(sorted(ENDPOINT_KEYS))})"
        )
        return None, None
    before = len(problems)
    problems += [f"{where}.{k}: {m}" for k, m in bounded.url_problems("base_url", node.get("base_url"))]
    for key in ("timeout_s", "backoff_s", "max_backoff_s", "retries", "max_response_bytes"):
        value = node.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int | float) or value < 0):
            problems.append(f"{where}.{key}: must be a number >= 0, got {value!r:.40}")
    env = node.get("api_key_env")
    if env is not None and (not isinstance(env, str) or not env.isidentifier()):
        problems.append(
            f"{where}.api_key_env: the NAME of an environment variable, got a value of another form"
        )
    elif env is not None and env not in os.environ:
        problems.append(f"{where}.api_key_env: environment variable {env} is not set")
    model_file = node.get("model_file")
    if model_file is not None and not os.path.isfile(str(model_file)):
        problems.append(f"{where}.model_file: {model_file} is not a file")
    if len(problems) > before:
        return None, None
    fields = {k: v for k, v in node.items() if k != "model_file" and v is not None}
    return ChatEndpoint(**fields), (str(model_file) if model_file is not None else None)


def _judges(value: Any, problems: list[str]) -> tuple[JudgeSpec, ...]:
    if not isinstance(value, list | tuple) or not value:
        problems.append("answer.judges: a non-empty list of judge names (e.g. [lexical])")
        return ()
    specs = []
    for i, entry in enumerate(value):
        if isinstance(entry, str):
            specs.append(JudgeSpec(entry))
        elif isinstance(entry, Mapping) and isinstance(entry.get("name"), str):
            specs.append(JudgeSpec(entry["name"], {k: v for k, v in entry.items() if k != "name"}))
        else:
            problems.append(f"answer.judges[{i}]: a judge name or {{name: ..., <option>: ...}}")
    names = [s.name for s in specs]
    try:
        from experiments.answer.judges import judge_names
    except ImportError as err:
        problems.append(f"answer.judges: the judges cannot be loaded ({err})")
        return tuple(specs)
    known = judge_names()
    for name in names:
        if name not in known:
            problems.append(f"answer.judges: unknown judge {name!r} (known: {', '.join(known)})")
    dupes = sorted({n for n in names if names.count(n) > 1 and not _has_options(specs, n)})
    if dupes:
        problems.append(f"answer.judges: {', '.join(dupes)} named twice")
    return tuple(specs)


def _has_options(specs: list[JudgeSpec], name: str) -> bool:
    return any(s.options for s in specs if s.name == name)


def read_settings(
    node: Mapping[str, Any], *, suite_k: int, suite_protocol: str | None
) -> tuple[AnswerSettings | None, list[str]]:
    """The settings of a resolved `answer` node, or None with every problem (`answer.<key>: ...`)."""
    problems: list[str] = []
    unknown = sorted(set(node) - KEYS)
    if unknown:
        problems.append(f"answer: unknown key(s) {', '.join(unknown)} (known: {', '.join(sorted(KEYS))})")
    source = node.get("source", "llm")
    if source not in SOURCES:
        problems.append(f"answer.source: must be one of {', '.join(SOURCES)}, got {source!r:.40}")
    path = node.get("path")
    if source == "file" and (not isinstance(path, str) or not os.path.isfile(path)):
        problems.append(
            f"answer.path: source=file needs a JSONL file of query ids and answers, got {path!r:.80}"
        )
    mode = node.get("mode", "live")
    if mode not in MODES:
        problems.append(f"answer.mode: must be one of {', '.join(MODES)}, got {mode!r:.40}")
    cassette = node.get("cassette")
    if mode in ("record", "replay") and not cassette:
        problems.append(f"answer.cassette: mode={mode} needs a cassette path")
    if mode == "replay" and cassette and not os.path.isfile(str(cassette)):
        problems.append(f"answer.cassette: replay needs an existing cassette, {cassette} is not a file")
    contexts = node.get("context", "retrieved")
    contexts = (contexts,) if isinstance(contexts, str) else tuple(contexts or ())
    bad = [c for c in contexts if c not in CONTEXTS]
    if not contexts or bad or len(set(contexts)) < len(contexts):
        problems.append(
            f"answer.context: one of {', '.join(CONTEXTS)} or a list of them without repeats, "
            f"got {list(contexts)!r:.80}"
        )
    k = _int(node, "k", problems, low=1)
    window = _int(node, "window_tokens", problems, low=1)
    max_tokens = _int(node, "max_tokens", problems, low=1, default=64)
    concurrency = _int(node, "concurrency", problems, low=1, default=1)
    sample = _int(node, "sample", problems, low=1)
    seed = _int(node, "seed", problems, low=0, default=42)
    chars = node.get("chars_per_token", 3.0)
    if isinstance(chars, bool) or not isinstance(chars, int | float) or chars <= 0:
        problems.append(f"answer.chars_per_token: a number > 0, got {chars!r:.40}")
    temperature = node.get("temperature", 0.0)
    if isinstance(temperature, bool) or not isinstance(temperature, int | float) or temperature < 0:
        problems.append(f"answer.temperature: a number >= 0, got {temperature!r:.40}")
    template = node.get("template")
    if template is not None:
        problems += _template_problems(template)
    protocol = node.get("protocol") or suite_protocol or "memeval"
    if protocol not in ("official", "memeval"):
        problems.append(f"answer.protocol: official or memeval, got {protocol!r:.40}")
    # An endpoint is needed to ask (source=llm, not replay); a replay still keys by its model_file.
    live = source == "llm" and mode != "replay"
    endpoint = model_file = None
    if live or (node.get("endpoint") or {}).get("base_url") is not None:
        endpoint, model_file = _endpoint(node.get("endpoint") or {}, "answer.endpoint", problems)
    elif (node.get("endpoint") or {}).get("model_file") is not None:
        model_file = str(node["endpoint"]["model_file"])
    model = node.get("model")
    if source == "llm" and (not isinstance(model, str) or not model.strip()):
        problems.append("answer.model: the model name the endpoint serves (answer.model=...)")
    judge_endpoint = endpoint
    if node.get("judge_endpoint"):  # the judges' own endpoint: the answerer's keys overridden
        base = dict(node.get("endpoint") or {})
        judge_endpoint, _ = _endpoint({**base, **node["judge_endpoint"]}, "answer.judge_endpoint", problems)
    judges = _judges(node.get("judges", ["lexical"]), problems)
    labels = node.get("labels")
    if labels is not None and not os.path.isfile(str(labels)):
        problems.append(f"answer.labels: {labels} is not a file")
    if problems:
        return None, problems
    return (
        AnswerSettings(
            source=source,
            path=path,
            endpoint=endpoint,
            model_file=model_file,
            model=model,
            temperature=float(temperature),
            seed=seed,
            max_tokens=max_tokens,
            k=k or suite_k,
            contexts=contexts,
            template=template,
            window_tokens=window,
            chars_per_token=float(chars),
            concurrency=concurrency,
            judges=judges,
            judge_endpoint=judge_endpoint,
            judge_model=node.get("judge_model") or model,
            mode=mode,
            cassette=str(cassette) if cassette else None,
            protocol=protocol,
            labels=str(labels) if labels else None,
            sample=sample,
        ),  # fmt: skip
        [],
    )


PLACEHOLDERS = ("question", "context", "now")


def _template_problems(template: Any) -> list[str]:
    """A config template may name only {question}, {context} and {now}."""
    import string

    if not isinstance(template, str) or not template.strip():
        return ["answer.template: a non-empty string with {question} and {context}"]
    try:
        names = {name for _, name, _, _ in string.Formatter().parse(template) if name is not None}
    except ValueError as err:
        return [f"answer.template: not a format string ({err})"]
    unknown = sorted(names - set(PLACEHOLDERS))
    if unknown:
        return [
            f"answer.template: unknown placeholder(s) {', '.join('{' + n + '}' for n in unknown)} "
            "(known: {question}, {context}, {now})"
        ]
    return []
