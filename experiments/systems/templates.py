"""The template language of the YAML adapters (HTTP endpoints, MCP tools: conf/system/), one module for both.

- **Filling** (`fill`): a template is JSON (a mapping, a list, a string). A string that is exactly one
  placeholder (`"{overrides}"`) becomes that value as JSON (an object, a list, a number, null);
  placeholders inside longer strings are replaced by their text; an unknown placeholder is an error.
  `fill_url_path` percent-encodes each placeholder's text (suite text never adds a path segment or a
  parameter). The values an operation may name:

      search   {query_id} {text} {scope} {scope.<name>} {scope_key} {k} {as_of} {overrides}
      ingest   {scope} {scope.<name>} {scope_key} {memories}  (the list of `memory` templates, one per
               memory: {id} {text} {created_at} {role} {metadata} {scope} {scope.<name>} {scope_key}
               {record} = the whole suite record); {memories.<field>}: that field of every filled
               memory, as one list (the parallel arrays of APIs such as Chroma's: `ids: "{memories.id}"`)
      reset, count, after_ingest, setup   {scope} {scope.<name>} {scope_key}
      ({scope_key}: memeval's canonical string for the whole scope)
      ingest, count, after_ingest, search   {setup.<name>}: what `setup` captured for the scope (HTTP)

  `{scope.<name>}` for a key the suite's scopes lack is an error before any call (`check_scope_fields`),
  never "" or null: those would send every scope the same value and pool them in one collection.

- **Secrets** (`fill_env`): `{env:NAME}` in a header (HTTP) or a server's environment (MCP) is read from
  the environment when it is used, never before (experiments/systems/secrets.py).
- **Reading** (`read_path`, `read_hits`, `read_count`): `results` names JSON paths (dots, `[i]` for list
  items) into the search answer: either `hits` (the list) and in each hit `id` (a string or an integer),
  `score` (optional, a number) and `text` (optional, a string), or parallel arrays `ids`, `scores`,
  `texts`, each a path to a list. A path that is missing, or a value of another kind (`"id": null`, a
  count that is a string), is an error naming the query id and the path.
- **Checking** (`adapter_problems`): what an adapter's operations must hold, as (field, problem) pairs.
"""

from __future__ import annotations

import functools
import json
import re
import urllib.parse
from collections.abc import Mapping, Sequence
from typing import Any

from experiments.systems import secrets
from experiments.systems.protocol import Hit, LiveSystemError, SearchRequest
from experiments.systems.secrets import describe, redact
from experiments.systems.stats import SystemStats
from retrieval.types import Memory, memory_record, scope_key

_PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_.]*)\}")


def fill_env(template: str, where: str) -> str:
    """The template with each `{env:NAME}` replaced by that variable's value (a known secret from now on);
    a missing one, or one holding a line break, is a LiveSystemError naming the variable and `where`."""

    def value(match: re.Match) -> str:
        try:
            return secrets.env_value(match[1], where)
        except secrets.SecretError as err:
            raise LiveSystemError(str(err)) from None

    return secrets.ENV_PLACEHOLDER.sub(value, str(template))


def fill(template: Any, values: Mapping[str, Any]) -> Any:
    """The template with its placeholders replaced (module docstring); an unknown placeholder is an error."""
    if isinstance(template, str):
        whole = _PLACEHOLDER.fullmatch(template)
        if whole:
            return _value(whole[1], values)
        return _PLACEHOLDER.sub(lambda m: _text(_value(m[1], values)), template)
    if isinstance(template, Mapping):
        return {str(k): fill(v, values) for k, v in template.items()}
    if isinstance(template, (list, tuple)):
        return [fill(v, values) for v in template]
    return template


def fill_url_path(template: str, values: Mapping[str, Any]) -> str:
    """A URL path template filled with each placeholder's text percent-encoded (module docstring)."""
    return _PLACEHOLDER.sub(lambda m: urllib.parse.quote(_text(_value(m[1], values)), safe=""), template)


def parse_json(payload: bytes | str, where: str) -> Any:
    """An answer's JSON (None when empty). `where` says who answered (`query q7: POST /search answered
    200`); not JSON, or nested deeper than the parser goes -> LiveSystemError (never a RecursionError)."""
    try:
        return json.loads(payload) if payload.strip() else None
    except RecursionError:
        raise LiveSystemError(f"{where} with JSON nested too deep to read") from None
    except ValueError:
        text = payload.decode(errors="replace") if isinstance(payload, bytes) else payload
        raise LiveSystemError(f"{where} with a body that is not JSON: {secrets.quote(text, 200)!r}") from None


def _value(name: str, values: Mapping[str, Any]) -> Any:
    head, _, rest = name.partition(".")
    if head not in values:
        raise LiveSystemError(f"body template names {{{name}}}; known here: {', '.join(sorted(values))}")
    value = values[head]
    if head == "scope" and rest and rest not in value:  # never "" or null: every scope would be one
        raise LiveSystemError(scope_field_problem(f"{{{name}}}", rest, value))
    if rest and isinstance(value, list):  # {memories.<field>}: one field of every item, as a list
        return [read_path(item, rest, f"{{{name}}}, item {i}") for i, item in enumerate(value)]
    return value if not rest else (value or {}).get(rest)


_SCOPE_FIELD = re.compile(r"\{scope\.([A-Za-z_][A-Za-z0-9_]*)\}")


def scope_field_problem(where: str, name: str, scope: Mapping[str, str]) -> str:
    return (
        f"{where} names {{scope.{name}}}, but the suite's scope {dict(scope)} has no {name!r} (its keys: "
        f"{', '.join(sorted(scope)) or 'none'}): every scope would be sent the same value and pooled into "
        "one; fill it from a key the scopes have, or from {scope_key} (nothing was sent)"
    )


def check_scope_fields(templates: Mapping[str, Any], scopes: Sequence[Mapping[str, str]]) -> None:
    """Before any call: every `{scope.<name>}` that a template (by its config key) names is a key of every
    scope of the suite, else a LiveSystemError naming the key, the placeholder and the scope's keys."""
    for where, template in templates.items():
        for name in sorted(set(_SCOPE_FIELD.findall(json.dumps(template, default=str)))):
            lacking = next((s for s in scopes if name not in s), None)
            if lacking is not None:
                raise LiveSystemError(scope_field_problem(where, name, lacking))


def _text(value: Any) -> str:
    return "" if value is None else value if isinstance(value, str) else json.dumps(value)


@functools.lru_cache(maxsize=256)
def _path_parts(path: str) -> tuple[str, ...]:
    return tuple(re.findall(r"[^.\[\]]+|\[\d+\]", path))


def read_path(document: Any, path: str, where: str) -> Any:
    """The value at a dotted JSON path (`data.results[0].id`); missing -> LiveSystemError naming it."""
    value = document
    for part in _path_parts(path):
        if part.startswith("["):
            i = int(part[1:-1])
            if not isinstance(value, list) or i >= len(value):
                raise LiveSystemError(f"{where}: JSON path {path!r}: no item {i} at {part!r}")
            value = value[i]
        else:
            if not isinstance(value, Mapping) or part not in value:
                raise LiveSystemError(f"{where}: JSON path {path!r}: no key {part!r} in the response")
            value = value[part]
    return value


def memory_records(
    template: Mapping[str, Any] | str, scope: Mapping[str, str], memories: Sequence[Memory]
) -> list:
    """The `memory` template filled for each memory; `{scope}` and `{scope.<name>}` are the ingest's scope."""
    return [fill(template, {**memory_values(m), **scope_values(scope)}) for m in memories]


def scope_values(scope: Mapping[str, str]) -> dict[str, Any]:
    """`{scope}` (the mapping) and `{scope_key}` (memeval's canonical, injective string for it: one value
    for a service that namespaces by a single string, whatever the suite's scope names)."""
    return {"scope": dict(scope), "scope_key": scope_key(scope)}


def memory_values(memory: Memory) -> dict[str, Any]:
    record = memory_record(memory)
    return {
        "id": memory.id,
        "text": memory.text,
        "created_at": memory.created_at,
        "role": memory.role,
        "metadata": dict(memory.metadata),
        "record": record,
    }


def search_values(request: SearchRequest) -> dict[str, Any]:
    """The placeholders a search template may name ({query_id}, {text}, {scope}, {scope_key}, {k}, {as_of},
    {overrides}); an override left None (declared but unset) is not sent."""
    return {
        "query_id": request.query_id,
        "text": request.text,
        **scope_values(request.scope),
        "k": request.k,
        "as_of": request.as_of,
        "overrides": {k: v for k, v in request.overrides.items() if v is not None},
    }


def read_count(answer: Any, path: str, where: str, stats: SystemStats) -> int:
    """The stored count at `path` of a count answer: a whole number >= 0, else an error naming the path (a
    count that is a string or null will never reach the number ingested: no waiting for it)."""
    try:
        stored = read_path(answer, path, where)
    except LiveSystemError:
        stats.add("errors")
        raise
    if isinstance(stored, bool) or not isinstance(stored, int) or stored < 0:
        stats.add("errors")
        raise LiveSystemError(
            f"{where}: JSON path {path!r} is not a count (a whole number >= 0): {describe(stored)}"
        )
    return stored


def read_hits(answer: Any, results: Mapping[str, Any], where: str, stats: SystemStats) -> list[Hit]:
    """The hits of a search answer through the configured JSON paths (`hits`, and per hit `id`, `score`,
    `text`; or the parallel arrays `ids`, `scores`, `texts`); a path that does not fit the answer, or a
    value of the wrong kind (an id that is null or an object, a score that is not a number, a text that
    is not a string), is an error naming the query, the result and the path. Ids and texts are redacted
    of known secrets (a service may echo one)."""
    if results.get("ids"):  # parallel arrays: read as rows, then as any list of hits
        return read_hits({"rows": parallel_rows(answer, results, where, stats)}, _ROWS, where, stats)
    hits = read_path(answer, str(results["hits"]), where)
    if not isinstance(hits, list):
        stats.add("errors")
        raise LiveSystemError(f"{where}: JSON path {results['hits']!r} is not a list: {describe(hits)}")
    out = []
    score_path, text_path = results.get("score"), results.get("text")
    for i, item in enumerate(hits):
        here = f"{where}, result {i}"
        try:
            mid = read_path(item, str(results["id"]), here)
            score = read_path(item, str(score_path), here) if score_path else None
            text = read_path(item, str(text_path), here) if text_path else None
        except LiveSystemError:
            stats.add("errors")
            raise
        problem = None
        if isinstance(mid, bool) or not isinstance(mid, (str, int)) or mid == "":
            problem = f"JSON path {results['id']!r} is not an id (a string or an integer): {describe(mid)}"
        elif score is not None and (isinstance(score, bool) or not isinstance(score, (int, float))):
            problem = f"JSON path {score_path!r} is not a number: {describe(score)}"
        elif text is not None and (isinstance(text, bool) or not isinstance(text, (str, int, float))):
            problem = f"JSON path {text_path!r} is not a text: {describe(text)}"
        if problem:
            stats.add("errors")
            raise LiveSystemError(f"{here}: {problem}")
        score = None if score is None else float(score)
        out.append(Hit(redact(str(mid)), score, None if text is None else redact(str(text))))
    return out


# Parallel arrays (`results: {ids, scores, texts}`) are read into rows with these keys.
_COLUMNS = {"ids": "id", "scores": "score", "texts": "text"}
_ROWS = {"hits": "rows", "id": "id", "score": "score", "text": "text"}


def parallel_rows(answer: Any, results: Mapping[str, Any], where: str, stats: SystemStats) -> list[dict]:
    """Parallel arrays, each a JSON path to a list, as one `{id, score, text}` row per hit (None where a
    column is not configured); a path that is not a list, or lists of different lengths, is an error."""
    columns = {}
    for key, row_key in _COLUMNS.items():
        column = read_path(answer, str(results[key]), where) if results.get(key) else None
        if results.get(key) and not isinstance(column, list):
            stats.add("errors")
            raise LiveSystemError(f"{where}: JSON path {results[key]!r} is not a list")
        columns[row_key] = column
    sizes = {str(results[k]): len(columns[r]) for k, r in _COLUMNS.items() if columns[r] is not None}
    if len(set(sizes.values())) > 1:
        stats.add("errors")
        raise LiveSystemError(f"{where}: parallel arrays of different lengths: {sizes}")
    n = sizes[str(results["ids"])]
    return [{r: None if c is None else c[i] for r, c in columns.items()} for i in range(n)]


def adapter_problems(
    group: str, specs: Mapping[str, Any], operations: Sequence[str], shape: tuple[str, str], adapter: Any
) -> list[tuple[str, str]]:
    """(field, problem) for what a YAML-configured adapter (HTTP endpoints, MCP tools) must hold: search and
    ingest among its operations (`specs`, each a mapping with the text field `shape[0]`), JSON paths for
    the hits and their ids (`adapter.results`), and `{setup.<name>}` names that setup captures."""
    key, expected = shape
    problems = [(f"{group}.{name}", "required") for name in ("search", "ingest") if name not in specs]
    for name, spec in specs.items():
        if name not in operations:
            problems.append((f"{group}.{name}", f"not an operation ({', '.join(operations)})"))
        elif not isinstance(spec, Mapping) or not isinstance(spec.get(key), str):
            problems.append((f"{group}.{name}", f"expected {expected}, got {spec!r}"))
    if adapter.results.get("hits") and adapter.results.get("ids"):
        problems.append(("results", "either hits (a list of objects) or ids (parallel arrays), not both"))
    elif not adapter.results.get("ids"):  # else parallel arrays: ids (+ optional scores, texts)
        problems += [
            (f"results.{p}", "a JSON path is required") for p in ("hits", "id") if not adapter.results.get(p)
        ]
    return problems + setup_problems(group, specs)


def setup_problems(group: str, specs: Mapping[str, Any]) -> list[tuple[str, str]]:
    """`{setup.<name>}` in any operation names a `capture` of the `setup` operation (a typo would otherwise
    send an empty string in a path)."""
    setup = specs.get("setup")
    captured = set(setup.get("capture") or {}) if isinstance(setup, Mapping) else set()
    problems = []
    for name, spec in specs.items():
        for used in sorted(set(re.findall(r"\{setup\.([A-Za-z0-9_]+)", json.dumps(spec, default=str)))):
            if name in ("setup", "reset", "health"):
                problems.append((f"{group}.{name}", f"names {{setup.{used}}}, but runs before setup"))
            elif used not in captured:
                problems.append(
                    (
                        f"{group}.{name}",
                        f"names {{setup.{used}}}, but {group}.setup captures {sorted(captured) or 'nothing'}",
                    )
                )
    return problems
