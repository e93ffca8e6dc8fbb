"""The HTTP adapter against a hostile service (tests/hostile_service.py): no secret is ever written, and
every request is bounded in time and bytes; each case ends in the right number or a clear exit 2 within
`timeout_s` + 1 s. `memeval-run` runs as a user runs it (a subprocess, in its own working directory);
the adapter is driven directly where a case is about one request."""

from __future__ import annotations

import datetime
import ipaddress
import json
import os
import re
import ssl
import subprocess
import sys
import threading
import time
import traceback
import urllib.parse
from dataclasses import dataclass
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from experiments.configure.compose import compose_config
from experiments.suites.jsonl import save_suite
from experiments.systems.http import HttpSystem
from experiments.systems.mcp import McpSystem
from experiments.systems.protocol import LiveSystemError, SearchRequest
from experiments.systems.stats import SystemStats
from experiments.systems.templates import read_hits
from tests.hostile_service import HostileService
from tests.support import REPO, tiny_suite

KEY_VAR = "MEMEVAL_TEST_API_KEY"
KEY = "sk-live-5f3c9a1e7d2b"  # a made-up key: what must appear in no output
TIMEOUT_S = 2.0


@pytest.fixture(scope="module")
def suite_dir(tmp_path_factory) -> Path:
    return save_suite(tiny_suite(), tmp_path_factory.mktemp("suite") / "tiny")


def _service(mode: str = "honest", **kwargs) -> HostileService:
    return HostileService(mode, tiny_suite().qrels, **kwargs)


@dataclass
class Run:
    rc: int
    stdout: str
    stderr: str
    error_at: float | None  # time.monotonic() when `error:` was printed
    cwd: Path


def memeval_run(cwd: Path, suite: Path, url: str, *overrides: str, env: dict | None = None) -> Run:
    """`memeval-run variant=system` on the tiny suite against `url`, in `cwd` (no MLflow unless asked)."""
    args = [
        str(Path(sys.executable).parent / "memeval-run"),
        "suite=jsonl",
        f"suite.path={suite}",
        "variant=system",
        f"system.base_url={url}",
        "progress=false",
        f"cache_dir={cwd / 'cache'}",
        f"system.adapter.timeout_s={TIMEOUT_S}",
        "system.adapter.retries=0",
        *overrides,
    ]
    if not any(o.startswith("tracking=") for o in overrides):
        args.append("tracking=none")
    full_env = {**os.environ, "MLFLOW_TRACKING_URI": "", "HF_HUB_OFFLINE": "1", **(env or {})}
    process = subprocess.Popen(
        args, cwd=cwd, env=full_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    err_lines: list[str] = []
    error_at: list[float] = []

    def read_stderr() -> None:
        for line in process.stderr:
            if line.startswith("error:") and not error_at:
                error_at.append(time.monotonic())
            err_lines.append(line)

    reader = threading.Thread(target=read_stderr)
    reader.start()
    stdout = process.stdout.read()
    process.wait(timeout=300)
    reader.join()
    return Run(process.returncode, stdout, "".join(err_lines), error_at[0] if error_at else None, cwd)


def _files_holding(root: Path, text: str) -> list[str]:
    return [str(p) for p in root.rglob("*") if p.is_file() and text.encode() in p.read_bytes()]


def _adapter(url: str, **fields) -> HttpSystem:
    """The shipped memeval_serve adapter config, aimed at `url`."""
    values = OmegaConf.to_container(compose_config(["variant=system", "tracking=none"]).system.adapter)
    values.pop("_target_")
    return HttpSystem(**{**values, "base_url": url, "timeout_s": TIMEOUT_S, "retries": 0, **fields})


def _request(qid: str = "c1:q0", text: str = "how should code snippets be formatted") -> SearchRequest:
    return SearchRequest(qid, text, {"conversation": "c1"}, 10)


# --- 2. the adapters never leak a secret ---------------------------------------------------------------


def test_a_key_holding_a_line_break_is_refused_naming_the_variable_never_the_value(monkeypatch):
    # Before: http.client's ValueError("Invalid header value b'Bearer sk-...\r\n...'") in a traceback.
    monkeypatch.setenv(KEY_VAR, f"{KEY}\r\nX-Injected: 1")
    with _service() as service:
        adapter = _adapter(service.url, headers={"Authorization": f"Bearer {{env:{KEY_VAR}}}"})
        for call in (adapter.check_available, lambda: adapter.search(_request())):
            with pytest.raises(LiveSystemError, match=f"{KEY_VAR} holds a line break") as caught:
                call()
            shown = "".join(traceback.format_exception(caught.value))
            assert KEY not in shown and "X-Injected" not in shown
        assert service.seen == []  # refused before anything was sent
        with pytest.raises(ValueError, match="headers.X-Note: a header name or value cannot hold"):
            _adapter(service.url, headers={"X-Note": "a\r\nX-Injected: 1"})  # at the config check


def test_a_service_echoing_its_headers_gets_the_key_redacted_from_the_error_and_the_hits(monkeypatch):
    monkeypatch.setenv(KEY_VAR, KEY)
    with _service("echo_headers") as service:
        adapter = _adapter(service.url, headers={"Authorization": f"Bearer {{env:{KEY_VAR}}}"})
        with pytest.raises(LiveSystemError, match="answered HTTP 400") as caught:
            adapter.search(_request())
        assert service.seen[-1][2]["Authorization"] == f"Bearer {KEY}"  # the key was sent, and echoed
        assert KEY not in str(caught.value) and f"Bearer {{env:{KEY_VAR}}}" in str(caught.value)
    # A hit whose text or id carries the key (a service that stores and returns what it is sent).
    answer = {"results": [{"id": KEY, "score": 1.0, "text": f"token={KEY}"}]}
    (hit,) = read_hits(answer, adapter.results, "query q", SystemStats())
    assert KEY not in hit.id + hit.text and hit.text == f"token={{env:{KEY_VAR}}}"


def test_a_password_in_base_url_is_refused_at_the_config_check_and_written_nowhere(tmp_path, suite_dir):
    # Before: the password was ignored by the transport, the run went on, config.yaml held it.
    password = "hunter2-not-a-real-one"
    with _service() as service:
        url = service.url.replace("http://", f"http://reader:{password}@")
        run = memeval_run(tmp_path, suite_dir, url, "tracking=mlflow")
        assert service.seen == []
    assert run.rc == 2, run.stderr
    assert "base_url: holds a user name or password" in run.stderr and "{env:" in run.stderr
    assert password not in run.stdout + run.stderr
    assert _files_holding(tmp_path, password) == []


def test_a_redirect_to_another_port_is_not_followed_and_that_port_never_sees_the_key(tmp_path, suite_dir):
    with _service() as elsewhere, _service("redirect", redirect_to=elsewhere.url) as service:
        run = memeval_run(
            tmp_path,
            suite_dir,
            service.url,
            f'+system.adapter.headers.Authorization="Bearer {{env:{KEY_VAR}}}"',
            env={KEY_VAR: KEY},
        )
        assert elsewhere.seen == []  # the honest service there would have answered, had it been asked
        assert all(h["Authorization"] == f"Bearer {KEY}" for _, _, h in service.seen)
    assert run.rc == 2, run.stderr
    assert re.search(
        r"query c[12]:q[01]: POST /v1/memories/search answered HTTP 302, a redirect to", run.stderr
    )
    assert "follows no redirect" in run.stderr
    assert KEY not in run.stdout + run.stderr and _files_holding(tmp_path, KEY) == []


def test_an_mcp_url_with_a_password_is_refused_without_quoting_it():
    tools = {"search": {"tool": "search"}, "ingest": {"tool": "ingest"}}
    with pytest.raises(ValueError, match=r"url: holds a user name or password .*\{env:") as caught:
        McpSystem(transport="http", url="http://reader:hunter2-mcp@127.0.0.1:8765/mcp", tools=tools)
    assert "hunter2-mcp" not in str(caught.value)


@pytest.mark.slow  # a new SQLite store takes ~10 s to create
def test_a_tracked_recorded_run_sends_the_key_writes_it_nowhere_and_logs_dollar_keys(tmp_path, suite_dir):
    # The default tracking (a SQLite store in the working directory), a cassette, a secret header, and a
    # body template with a key MLflow refuses (Chroma's `$contains`). Before: the run wrote its results,
    # then exited 2 with the MLflow run FAILED and no params.
    import mlflow
    import yaml

    system = yaml.safe_load((REPO / "conf" / "system" / "memeval_serve.yaml").read_text())
    system["adapter"]["endpoints"]["search"]["body"]["where"] = {"$contains": "{text}"}
    (tmp_path / "conf" / "system").mkdir(parents=True)
    (tmp_path / "conf" / "system" / "dollar.yaml").write_text(yaml.safe_dump(system))
    with _service() as service:
        run = memeval_run(
            tmp_path,
            suite_dir,
            service.url,
            f"hydra.searchpath=[file://{tmp_path / 'conf'}]",
            "system=dollar",
            f'+system.adapter.headers.Authorization="Bearer {{env:{KEY_VAR}}}"',
            "system.mode=record",
            f"system.cassette={tmp_path / 'cassette.jsonl'}",
            f"hydra.run.dir={tmp_path / 'run'}",
            "tracking=mlflow",
            env={KEY_VAR: KEY},
        )
        assert {h.get("Authorization") for _, _, h in service.seen} == {f"Bearer {KEY}"}
    assert run.rc == 0, run.stderr
    client = mlflow.MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}")
    (logged,) = client.search_runs([client.get_experiment_by_name("memeval").experiment_id])
    assert logged.info.status == "FINISHED"
    assert logged.data.params["system.adapter.endpoints.search.body.where._contains"] == "{text}"
    assert logged.data.params["system.adapter.headers.Authorization"] == f"Bearer {{env:{KEY_VAR}}}"
    assert KEY not in run.stdout + run.stderr and _files_holding(tmp_path, KEY) == []


# --- 4. bounded, always -------------------------------------------------------------------------------


def test_a_slow_loris_answer_ends_at_timeout_s_not_at_its_last_byte(tmp_path, suite_dir):
    # Before: each read waited at most timeout_s, and a byte came every second: the request ran ~4 min.
    with _service("slow_loris") as service:
        adapter = _adapter(service.url)
        started = time.monotonic()
        with pytest.raises(LiveSystemError, match=r"query c1:q0: no answer within 2 s"):
            adapter.search(_request())
        assert time.monotonic() - started <= TIMEOUT_S + 1
        assert adapter.stats.snapshot()["timeouts"] == 1
    with _service("slow_loris") as service:
        run = memeval_run(tmp_path, suite_dir, service.url)
        assert run.rc == 2 and re.search(r"query c[12]:q[01]: no answer within 2 s", run.stderr), run.stderr
        assert run.error_at - service.hostile_at <= TIMEOUT_S + 1


def test_a_50_mb_answer_is_refused_at_the_cap_naming_the_query_and_read_no_further(tmp_path, suite_dir):
    # Before: all 50 MB were read into memory, then parsed.
    with _service("big") as service:
        adapter = _adapter(service.url)
        started = time.monotonic()
        with pytest.raises(LiveSystemError, match=r"query c1:q0: .* over system.adapter.max_response_bytes"):
            adapter.search(_request())
        assert time.monotonic() - started <= TIMEOUT_S + 1
        time.sleep(0.2)  # the server notices the hang-up
        assert service.sent_bytes < service.big_bytes  # it was cut off, not read to the end
        assert adapter.stats.snapshot()["retries"] == 0  # it would not shrink


@pytest.mark.parametrize(
    ("mode", "message"),
    [
        ("big", r"query c[12]:q[01]: POST /v1/memories/search sent an answer of more than 8,388,608 bytes"),
        (
            "count_string",
            r"count of scope \{'conversation': 'c[12]'\}: JSON path 'count' is not a count .*: '5'",
        ),
        ("nested", r"query c[12]:q[01]: POST /v1/memories/search answered 200 with JSON nested too deep"),
        ("null_id", r"query c[12]:q[01], result 0: JSON path 'id' is not an id .*: None"),
    ],
)
def test_a_malformed_or_oversized_answer_is_exit_2_naming_the_query_and_path(
    tmp_path, suite_dir, mode, message
):
    # Before: big read 50 MB; count_string waited searchable_timeout_s; nested was a RecursionError
    # traceback; null_id was scored as a memory named "None".
    with _service(mode) as service:
        run = memeval_run(tmp_path, suite_dir, service.url)
        assert run.rc == 2 and re.search(message, run.stderr), run.stderr
        assert "Traceback" not in run.stderr
        assert run.error_at - service.hostile_at <= TIMEOUT_S + 1
    assert list(tmp_path.rglob("metrics.json")) == []


def test_a_port_out_of_range_is_exit_2_naming_base_url(tmp_path, suite_dir):
    # Before: ValueError("Port out of range 0-65535") in a traceback, exit 1, from the first request.
    run = memeval_run(tmp_path, suite_dir, "http://127.0.0.1:70000")
    assert run.rc == 2 and "base_url: Port out of range" in run.stderr and "Traceback" not in run.stderr


def test_placeholders_in_the_url_are_percent_encoded_and_control_characters_are_not_retried():
    # Before: `../` and `&x=` became path segments and parameters; `\n` made http.client refuse the URL,
    # which was retried as "unreachable".
    text = "../reset?k=999&x=1 #frag\n\x00é"
    with _service() as service:
        endpoints = dict(_adapter(service.url).endpoints)
        endpoints["search"] = {
            **endpoints["search"],
            "path": "/v1/memories/{scope.conversation}/search?q={text}&n={k}",
        }
        adapter = _adapter(service.url, retries=2, endpoints=endpoints)
        adapter.search(_request(text=text))
        ((method, raw, _),) = service.seen
    parts = urllib.parse.urlsplit(raw)
    assert method == "POST" and parts.path == "/v1/memories/c1/search" and parts.fragment == ""
    assert urllib.parse.parse_qs(parts.query) == {"q": [text], "n": ["10"]}
    assert adapter.stats.snapshot()["retries"] == 0


def _self_signed(folder: Path) -> tuple[Path, Path]:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), False
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_file, key_file = folder / "cert.pem", folder / "key.pem"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    return cert_file, key_file


def test_https_works_at_the_start_up_check_and_after_it_with_the_configured_headers(tmp_path, monkeypatch):
    # Before: the start-up check spoke plain HTTP to an https URL ("not reachable") and sent no headers.
    monkeypatch.setenv(KEY_VAR, KEY)
    cert, key = _self_signed(tmp_path)
    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls.load_cert_chain(cert, key)
    headers = {"Authorization": f"Bearer {{env:{KEY_VAR}}}"}
    with _service(tls=tls) as service:
        assert service.url.startswith("https://")
        untrusted = _adapter(service.url, headers=headers)
        with pytest.raises(LiveSystemError, match="not reachable .*CERTIFICATE_VERIFY_FAILED"):
            untrusted.check_available()
        adapter = _adapter(service.url, headers=headers, ca_file=str(cert))
        adapter.check_available()
        adapter.reset({"conversation": "c1"})
        assert adapter.search(_request()) == []  # nothing ingested: an empty, honest answer
        method, path, sent = service.seen[0]
        assert (method, path, sent["Authorization"]) == ("GET", "/health", f"Bearer {KEY}")
        assert [p for _, p, _ in service.seen[1:]] == ["/v1/memories/reset", "/v1/memories/search"]


# --- 3. the verdict: junk and other-scope ids keep their rank, NaN is refused ------------------------------


def test_ten_junk_ids_first_make_rr_one_eleventh(tmp_path, suite_dir):
    with _service("junk_first") as service:
        run = memeval_run(tmp_path, suite_dir, service.url, f"hydra.run.dir={tmp_path / 'run'}")
    assert run.rc == 0, run.stderr
    overall = json.loads((tmp_path / "run" / "metrics.json").read_text())["overall"]
    assert overall["RR"] == pytest.approx(1 / 11)  # every answerable query's first relevant hit is 11th


def test_other_scope_ids_first_keep_their_rank_and_show_as_leaks(tmp_path, suite_dir):
    with _service("other_scope") as service:
        run = memeval_run(tmp_path, suite_dir, service.url, f"hydra.run.dir={tmp_path / 'run'}")
    assert run.rc == 0, run.stderr
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert metrics["overall"]["RR"] == pytest.approx(1 / 6)  # the other scope's 5 memories come first
    assert metrics["scope_leaks"] > 0 and re.search(r"scope leaks [1-9]", run.stdout)


def test_nan_and_infinite_scores_are_exit_2_naming_the_query(tmp_path, suite_dir):
    with _service("nan") as service:
        run = memeval_run(tmp_path, suite_dir, service.url)
        assert run.rc == 2, run.stderr
        assert re.search(r"query c[12]:q[01]", run.stderr) and re.search(r"nan|inf|finite", run.stderr, re.I)
        assert run.error_at - service.hostile_at <= TIMEOUT_S + 1


def test_the_health_answer_names_the_service_and_never_echoes_a_secret(monkeypatch):
    from experiments.systems import secrets
    from experiments.systems.http import _service_identity

    monkeypatch.setenv("MEMEVAL_TEST_KEY", "s3cr3t-value")
    secrets.env_value("MEMEVAL_TEST_KEY", "header X-Key")  # read as a header value: now a known secret
    body = json.dumps({"status": "ok", "variant": "exp05", "version": "s3cr3t-value", "counts": {"a": 1}})
    identity = _service_identity(body.encode())
    assert identity["variant"] == "exp05" and "s3cr3t" not in json.dumps(identity)
    assert "counts" not in identity
    assert _service_identity(b"not json") == {} and _service_identity(b"[1]") == {}
