"""memeval-serve runs nothing a client sends and answers only the clients it should (issue 32, part 1).

Against real `memeval-serve` processes on 127.0.0.1 (HTTP and MCP faces): a `config_override` is a plain
value for a declared stage field, so a `_target_` in any field position or through any mapped key, an
`${oc.env:...}` interpolation or a nested object is a 400 naming the key, with nothing executed (each
request names its own marker file, which an instantiated `pathlib.Path.touch` would create); a
`text/plain` or cross-origin POST, a foreign `Host` and a missing or wrong token are refused before the
service is touched; every malformed request is a 4xx with a message, never a 500. A valid override still
ranks as the in-process variant with the same command-line override.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from contextlib import contextmanager
from pathlib import Path

import pytest
import yaml

from experiments.serve.service import OVERRIDE_KEYS_FILE, MemoryService
from tests.live_services import free_port
from tests.support import CACHE_DIR, REPO

SECRET_ENV = "MEMEVAL_SERVE_TEST_SECRET"
SECRET = "s3cr3t-value-that-must-never-show"
TOKEN_ENV = "MEMEVAL_SERVE_TEST_TOKEN"
TOKEN = "t0ken-that-must-never-show"
ENV = {**os.environ, "MLFLOW_TRACKING_URI": "", "HF_HUB_OFFLINE": "1", SECRET_ENV: SECRET, TOKEN_ENV: TOKEN}
SCOPE = {"conversation": "1"}
RECORDS = [  # two instructions among facts (instruction_tagging tags the user's imperatives)
    {"id": "m1", "text": "Always answer in French when I ask about recipes.", "role": "user"},
    {"id": "m2", "text": "I cooked a ratatouille recipe last night with my sister.", "role": "user"},
    {
        "id": "m3",
        "text": "My favourite recipe site is down this week, the recipe answers are gone.",
        "role": "user",
    },
    {"id": "m4", "text": "Never use bullet points in recipe answers.", "role": "user"},
    {"id": "m5", "text": "The recipe for bread needs 500 g of flour.", "role": "assistant"},
]


@contextmanager
def served(*args: str, ready_path: str = "/health", headers: dict | None = None):
    """memeval-serve <args> on a free loopback port; yields (port, process, log path)."""
    port = free_port()
    log = Path(os.environ.get("TMPDIR", "/tmp")) / f"memeval-serve-security-{port}.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "experiments.serve.cli",
                *args,
                f"cache_dir={CACHE_DIR}",
                "--port",
                str(port),
            ],
            cwd=REPO,
            env=ENV,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + 180
        while True:
            try:
                status, _ = request(port, "GET", ready_path, headers=headers)
                if status < 500:
                    break
            except OSError:
                pass
            assert proc.poll() is None, (
                f"memeval-serve exited with {proc.returncode}: {log.read_text()[-2000:]}"
            )
            assert time.monotonic() < deadline, "memeval-serve did not come up in 180 s"
            time.sleep(0.3)
        yield port, proc, log
    finally:
        if proc.poll() is None:
            proc.terminate()
            proc.wait(timeout=30)


def request(
    port: int,
    method: str,
    path: str,
    body: bytes | None = None,
    headers: dict | None = None,
) -> tuple[int, bytes]:
    """One raw request (urllib sets Host to 127.0.0.1:port unless `headers` names another)."""
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=body, method=method)
    for name, value in (headers or {}).items():
        req.add_header(name, value)
    try:
        with urllib.request.urlopen(req, timeout=60) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as err:
        return err.code, err.read()


def post(port: int, path: str, body: object, headers: dict | None = None) -> tuple[int, dict]:
    status, raw = request(
        port, "POST", path, json.dumps(body).encode(), {"Content-Type": "application/json", **(headers or {})}
    )
    return status, json.loads(raw)


def search_body(override: dict) -> dict:
    return {"query": "recipe answers", "scope": SCOPE, "k": 5, "config_override": override}


@pytest.fixture(scope="module")
def exp05():
    """memeval-serve serving exp05 (every kind of stage: ingest, two channels, fusion, rank stages)."""
    with served("variant=exp05", "tracking=none") as (port, _, log):
        assert post(port, "/v1/memories/ingest", {"scope": SCOPE, "memories": RECORDS})[0] == 200
        yield port, log


@pytest.fixture(scope="module")
def exp05_stages() -> dict:
    """The served variant's stages (disabled ones included): every field a client could aim at."""
    service = MemoryService.from_overrides(["variant=exp05", "tracking=none"])
    return dict(service.stages)


def hostile_overrides(stages: dict, marker_dir: Path) -> list[tuple[str, object, Path]]:
    """(key, value, marker) for a `_target_` in every position: every field of every stage (and below
    it), the stage node itself, its `_target_`, every mapped key, inside a list and as a string."""
    out = []

    def touch(key: str) -> tuple[str, object, Path]:
        marker = marker_dir / f"m{len(out)}"
        return key, {"_target_": "pathlib.Path.touch", "_args_": [str(marker)]}, marker

    for name, stage in stages.items():
        out.append(touch(f"stage.{name}"))
        out.append((f"stage.{name}._target_", "pathlib.Path.touch", marker_dir / "never"))
        for f in dataclasses.fields(stage):
            out.append(touch(f"stage.{name}.{f.name}"))
            out.append(touch(f"stage.{name}.{f.name}.x"))
            key, value, marker = touch(f"stage.{name}.{f.name}")
            out.append((key, [value], marker))
    for key in yaml.safe_load(OVERRIDE_KEYS_FILE.read_text())["override_keys"]:
        out.append(touch(key))
        key, value, marker = touch(key)
        out.append((key, [value], marker))
    return out


def test_a_target_in_every_field_position_and_mapped_key_is_refused_with_nothing_run(
    exp05, exp05_stages, tmp_path
):
    port, _ = exp05
    attempts = hostile_overrides(exp05_stages, tmp_path)
    assert len(attempts) > 100  # every stage's every field, three ways, and the mapped keys
    for key, value, _ in attempts:
        status, answer = post(port, "/v1/memories/search", search_body({key: value}))
        assert status == 400, (key, status, answer)
        assert key in answer["error"], (key, answer)
    assert not [marker for _, _, marker in attempts if marker.exists()], "a client's _target_ was run"
    assert not list(tmp_path.iterdir())


def test_an_interpolation_is_refused_and_never_resolved(exp05):
    port, _ = exp05
    for key, value in [
        ("stage.bm25.k1", f"${{oc.env:{SECRET_ENV}}}"),
        ("instructionBoostWeight", f"${{oc.env:{SECRET_ENV}}}"),
        ("stage.instruction_tagging.anchor", f"x${{oc.env:{SECRET_ENV}}}"),
        ("stage.instruction_tagging.anchor", "${stage.dense.encoder}"),
        ("stage.bm25.k1", [f"${{oc.env:{SECRET_ENV}}}"]),
    ]:
        status, answer = post(port, "/v1/memories/search", search_body({key: value}))
        assert status == 400 and key in answer["error"], (key, answer)
        assert SECRET not in json.dumps(answer)


def test_nested_objects_and_lists_of_objects_are_refused(exp05):
    port, _ = exp05
    for value in [{"a": 1}, {"k1": 1.2}, [[1, 2]], [{"a": 1}], {}]:
        status, answer = post(port, "/v1/memories/search", search_body({"stage.bm25.k1": value}))
        assert status == 400 and "stage.bm25.k1" in answer["error"], (value, answer)


def test_out_of_range_and_mistyped_values_name_the_key_and_the_range(exp05):
    port, _ = exp05
    status, answer = post(port, "/v1/memories/search", search_body({"bm25K1": -0.5}))
    assert status == 400 and "bm25K1" in answer["error"] and ">= 0" in answer["error"], answer
    status, answer = post(port, "/v1/memories/search", search_body({"rrfK": 0}))
    assert status == 400 and "rrfK" in answer["error"] and "> 0" in answer["error"], answer
    status, answer = post(port, "/v1/memories/search", search_body({"stage.bm25.k1": "heavy"}))
    assert status == 400 and "stage.bm25.k1" in answer["error"] and "float" in answer["error"], answer
    status, answer = post(port, "/v1/memories/search", search_body({"stage.bm25.k1": 10**400}))
    assert status == 400 and "stage.bm25.k1" in answer["error"], answer
    status, answer = post(port, "/v1/memories/search", search_body({"instructionBoostEnabled": 1}))
    assert status == 400 and "bool" in answer["error"], answer


def test_a_valid_override_ranks_as_the_in_process_variant_with_that_override(exp05):
    port, _ = exp05
    status, answer = post(port, "/v1/memories/search", search_body({"instructionBoostWeight": 0.2}))
    assert status == 200, answer
    local = MemoryService.from_overrides(
        ["variant=exp05", "tracking=none", f"cache_dir={CACHE_DIR}", "stage.instruction_boost.weight=0.2"]
    )
    local.ingest(SCOPE, RECORDS)
    expected = [[h.id, h.score] for h in local.search("recipe answers", SCOPE, 5)]
    assert [[h["id"], h["score"]] for h in answer["results"]] == expected
    # ... and differs from the unboosted ranking's scores, so the override did reach the stage
    status, off = post(port, "/v1/memories/search", search_body({"instructionBoostEnabled": False}))
    assert status == 200 and [h["score"] for h in off["results"]] != [s for _, s in expected]


# --- who may ask ------------------------------------------------------------------------------------------


def test_a_text_plain_cross_origin_post_and_a_foreign_host_are_refused_before_any_work(exp05):
    port, _ = exp05
    scope = {"conversation": "browser"}
    body = json.dumps({"scope": scope, "memories": [{"id": "x", "text": "planted"}]}).encode()
    for headers, expected in [
        ({"Content-Type": "text/plain", "Origin": "http://evil.example"}, 403),
        ({"Content-Type": "text/plain"}, 415),
        ({"Content-Type": "application/x-www-form-urlencoded"}, 415),
        ({}, 415),
        ({"Content-Type": "application/json", "Origin": "http://evil.example"}, 403),
        ({"Content-Type": "application/json", "Origin": "null"}, 403),
        ({"Content-Type": "application/json", "Host": f"evil.example:{port}"}, 421),
        ({"Content-Type": "application/json", "Host": "evil.example"}, 421),
        ({"Content-Type": "application/json", "Host": f"127.0.0.1:{port + 1}"}, 421),
    ]:
        status, raw = request(port, "POST", "/v1/memories/ingest", body, headers)
        assert status == expected, (headers, status, raw)
        assert "error" in json.loads(raw)
    status, raw = request(port, "GET", "/health", headers={"Host": f"evil.example:{port}"})
    assert status == 421
    assert post(port, "/v1/memories/count", {"scope": scope})[1] == {"count": 0}  # nothing was stored
    for host in (f"127.0.0.1:{port}", f"localhost:{port}", f"LOCALHOST:{port}", f"[::1]:{port}"):
        assert post(port, "/v1/memories/count", {"scope": scope}, {"Host": host})[0] == 200, host


@pytest.fixture(scope="module")
def guarded():
    """memeval-serve with a bearer token and one allowed browser origin."""
    args = ("variant=bm25", "tracking=none", "--token-env", TOKEN_ENV, "--allow-origin", "http://ui.example")
    with served(*args, headers={"Authorization": f"Bearer {TOKEN}"}) as (port, _, log):
        yield port, log


def test_a_missing_or_wrong_token_is_401_and_the_token_is_never_printed(guarded):
    port, log = guarded
    body = {"scope": SCOPE, "memories": RECORDS[:1]}
    for headers in [
        {},
        {"Authorization": "Bearer wrong"},
        {"Authorization": TOKEN},
        {"Authorization": "Basic x"},
    ]:
        status, answer = post(port, "/v1/memories/ingest", body, headers)
        assert status == 401 and "token" in answer["error"], (headers, answer)
        assert TOKEN not in json.dumps(answer)
    assert request(port, "GET", "/health") == (200, b'{"status": "ok"}')  # liveness only: no details
    assert "variant" in json.loads(
        request(port, "GET", "/health", headers={"Authorization": f"Bearer {TOKEN}"})[1]
    )
    auth = {"Authorization": f"Bearer {TOKEN}"}
    assert post(port, "/v1/memories/count", {"scope": SCOPE}, auth)[1] == {"count": 0}  # nothing stored
    assert post(port, "/v1/memories/ingest", body, auth)[0] == 200
    assert post(port, "/v1/memories/ingest", body, {**auth, "Origin": "http://ui.example"})[0] == 200
    assert post(port, "/v1/memories/ingest", body, {**auth, "Origin": "http://evil.example"})[0] == 403
    assert TOKEN not in log.read_text()


def test_only_an_allowed_origin_gets_its_cors_preflight_answered(guarded):
    port, _ = guarded
    ask = {"Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "content-type"}
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/memories/search", method="OPTIONS")
    for name, value in {**ask, "Origin": "http://ui.example"}.items():
        req.add_header(name, value)
    with urllib.request.urlopen(req, timeout=30) as response:  # no token: a browser sends none here
        assert response.status == 204
        assert response.headers["Access-Control-Allow-Origin"] == "http://ui.example"
    assert (
        request(port, "OPTIONS", "/v1/memories/search", headers={**ask, "Origin": "http://evil.example"})[0]
        == 403
    )


def test_a_token_env_that_is_not_set_exits_2():
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "experiments.serve.cli",
            "variant=bm25",
            "--token-env",
            "MEMEVAL_NO_SUCH_VAR_X",
        ],
        cwd=REPO,
        env=ENV,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2 and "MEMEVAL_NO_SUCH_VAR_X" in proc.stderr, proc.stderr[-2000:]


# --- bad requests are 4xx, never 500 ----------------------------------------------------------------------


BAD_SEARCHES = [
    {"query": "x", "scope": SCOPE, "k": True},
    {"query": "x", "scope": SCOPE, "k": 10**30},
    {"query": "x", "scope": SCOPE, "k": -3},
    {"query": "x", "scope": SCOPE, "k": 0},
    {"query": "x", "scope": SCOPE, "k": 2.5},
    {"query": "x", "scope": SCOPE, "k": "5"},
    {"query": "x", "scope": SCOPE, "k": None},
    {"query": 5, "scope": SCOPE},
    {"query": "x", "scope": {"conversation": {"a": 1}}},
    {"query": "x", "scope": {"conversation": None}},
    {"query": "x", "scope": {"conversation": 1}},
    {"query": "x", "scope": ["conversation", "1"]},
    {"query": "x", "scope": {}},
    {"query": "x", "scope": SCOPE, "as_of": 5},
    {"query": "x", "scope": SCOPE, "query_id": {"a": 1}},
    {"query": "x", "scope": SCOPE, "config_override": [1]},
    {"query": "x", "scope": SCOPE, "config_override": "stage.bm25.k1=2"},
    {"query": "x", "scope": SCOPE, "config_override": {"nosuchKey": 1}},
    {"query": "x", "scope": SCOPE, "config_override": {"stage.nosuch.x": 1}},
    {"query": "x", "scope": SCOPE, "config_override": {"stage.bm25.nosuch": 1}},
    {"query": "x", "scope": SCOPE, "config_override": {"stage.dense.encoder": "x"}},
]
BAD_INGESTS = [
    {"scope": SCOPE, "memories": [{"text": "no id"}]},
    {"scope": SCOPE, "memories": [{"id": "a"}]},
    {"scope": SCOPE, "memories": [{"id": 1, "text": "x"}]},
    {"scope": SCOPE, "memories": [{"id": "a", "text": ["x"]}]},
    {"scope": SCOPE, "memories": [{"id": "a", "text": "x", "created_at": 5}]},
    {"scope": SCOPE, "memories": [{"id": "a", "text": "x", "colour": "red"}]},
    {"scope": SCOPE, "memories": [{"id": "a b", "text": "x"}]},
    {"scope": SCOPE, "memories": [{"id": "a", "text": "x", "metadata": "x"}]},
    {"scope": SCOPE, "memories": [{"id": "a", "text": "x", "tags": 5}]},
    {"scope": SCOPE, "memories": [{"id": "a", "text": "x", "importance": "urgent"}]},
    {"scope": SCOPE, "memories": [{"id": "a", "text": "x", "confidence": "high"}]},
    {"scope": SCOPE, "memories": [{"id": "a", "text": "x", "deleted": "no"}]},
    {"scope": SCOPE, "memories": ["a"]},
    {"scope": SCOPE, "memories": {"id": "a", "text": "x"}},
    {"scope": SCOPE},
]


def test_malformed_requests_are_4xx_with_a_message_never_500(exp05):
    port, _ = exp05
    cases = [("/v1/memories/search", json.dumps(b).encode()) for b in BAD_SEARCHES]
    cases += [("/v1/memories/ingest", json.dumps(b).encode()) for b in BAD_INGESTS]
    for route in ("/v1/memories/search", "/v1/memories/ingest", "/v1/memories/reset", "/v1/memories/count"):
        cases += [
            (route, b"[" * 100_000 + b"]" * 100_000),  # deeper than any parser's recursion
            (route, b'{"scope": ' * 50_000 + b"1" + b"}" * 50_000),
            (route, b"{not json"),
            (route, b"\xff\xfe"),
            (route, b"[1, 2]"),
            (route, b'"scope"'),
            (route, b"null"),
            (route, b"1" * 5000),  # an integer past Python's digit limit
        ]
    for route, raw in cases:
        status, answer = request(port, "POST", route, raw, {"Content-Type": "application/json"})
        assert 400 <= status < 500, (route, raw[:200], status, answer[:500])
        assert json.loads(answer)["error"], (route, raw[:200])
    assert post(port, "/v1/memories/count", {"scope": SCOPE})[0] == 200  # still serving


# --- the MCP face ------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def mcp_http():
    auth = {"Authorization": f"Bearer {TOKEN}"}
    with served(
        "--mcp",
        "http",
        "variant=bm25",
        "tracking=none",
        "--token-env",
        TOKEN_ENV,
        ready_path="/mcp",
        headers=auth,
    ) as (port, _, log):
        yield port, log


def _mcp_search(port: int, override: dict) -> tuple[bool, str]:
    """(is_error, text) of the MCP `search` tool called with `override`, through the official client."""
    import anyio
    import httpx
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    async def call() -> tuple[bool, str]:
        headers = {"Authorization": f"Bearer {TOKEN}"}
        async with httpx.AsyncClient(headers=headers, timeout=60) as http:
            async with streamable_http_client(f"http://127.0.0.1:{port}/mcp", http_client=http) as (r, w, *_):
                async with ClientSession(r, w) as session:
                    await session.initialize()
                    result = await session.call_tool(
                        "search", {"text": "x", "scope": SCOPE, "k": 3, "config_override": override}
                    )
                    return bool(result.is_error), " ".join(
                        getattr(c, "text", "") for c in result.content or []
                    )

    return anyio.run(call)


def test_the_mcp_search_tool_refuses_a_target_and_an_interpolation(mcp_http, tmp_path):
    port, _ = mcp_http
    marker = tmp_path / "mcp-marker"
    for key, value in [
        ("stage.bm25.k1", {"_target_": "pathlib.Path.touch", "_args_": [str(marker)]}),
        ("bm25K1", {"_target_": "pathlib.Path.touch", "_args_": [str(marker)]}),
        ("stage.bm25", {"_target_": "pathlib.Path.touch", "_args_": [str(marker)]}),
        ("stage.bm25.k1", f"${{oc.env:{SECRET_ENV}}}"),
    ]:
        is_error, text = _mcp_search(port, {key: value})
        assert is_error and key in text and SECRET not in text, (key, text)
    assert not marker.exists()
    is_error, text = _mcp_search(port, {"bm25K1": 1.5})  # a valid override is answered
    assert not is_error and json.loads(text) == {"results": []}


def test_the_mcp_http_face_checks_host_origin_token_and_content_type(mcp_http):
    port, log = mcp_http
    init = json.dumps(
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-03-26",
                "capabilities": {},
                "clientInfo": {"name": "t", "version": "0"},
            },
        }
    ).encode()
    base = {"Accept": "application/json, text/event-stream", "Authorization": f"Bearer {TOKEN}"}
    for headers, expected in [
        ({**base, "Content-Type": "application/json", "Host": f"evil.example:{port}"}, 421),
        ({**base, "Content-Type": "application/json", "Origin": "http://evil.example"}, 403),
        ({**base, "Content-Type": "text/plain"}, 415),
        ({**base, "Content-Type": "application/json", "Authorization": "Bearer wrong"}, 401),
    ]:
        status, raw = request(port, "POST", "/mcp", init, headers)
        assert status == expected, (headers, status, raw[:300])
    assert request(port, "POST", "/mcp", init, {**base, "Content-Type": "application/json"})[0] == 200
    assert TOKEN not in log.read_text()


# --- the AtomicMemory shape (issue 32, part 6): system=atomicmemory talks to memeval-serve -----------------


def _memeval_run(cwd: Path, run_dir: Path, *overrides: str, env: dict) -> subprocess.CompletedProcess:
    args = [sys.executable, "-m", "experiments.run", f"hydra.run.dir={run_dir}", f"cache_dir={cwd / 'cache'}"]
    args += [f"encoder.cache_dir={CACHE_DIR / 'embeddings'}", "progress=false", "tracking=none", *overrides]
    return subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=900)


@pytest.mark.slow
def test_system_atomicmemory_against_memeval_serve_ranks_as_the_in_process_run(tmp_path, beam_100k):
    suite = ["suite=beam", f"suite.path={beam_100k / '1'}"]
    in_process = _memeval_run(tmp_path, tmp_path / "in_process", *suite, "variant=bm25", env=ENV)
    assert in_process.returncode == 0, in_process.stderr[-3000:]
    with served(
        "variant=bm25",
        "tracking=none",
        "--token-env",
        TOKEN_ENV,
        headers={"Authorization": f"Bearer {TOKEN}"},
    ) as (
        port,
        _,
        log,
    ):
        system = [
            "variant=system",
            "variant.name=bm25",
            "system=atomicmemory",
            f"system.base_url=http://127.0.0.1:{port}",
        ]
        wrong = _memeval_run(
            tmp_path, tmp_path / "wrong", *suite, *system, env={**ENV, "ATOMICMEMORY_API_KEY": "wrong"}
        )
        assert wrong.returncode == 2 and "401" in wrong.stdout + wrong.stderr, wrong.stderr[-3000:]
        served_run = _memeval_run(
            tmp_path, tmp_path / "served", *suite, *system, env={**ENV, "ATOMICMEMORY_API_KEY": TOKEN}
        )
        assert served_run.returncode == 0, served_run.stdout[-3000:] + served_run.stderr[-3000:]
        assert (
            TOKEN not in log.read_text() + wrong.stdout + wrong.stderr + served_run.stdout + served_run.stderr
        )
    assert (tmp_path / "served" / "run.trec").read_bytes() == (
        tmp_path / "in_process" / "run.trec"
    ).read_bytes()
