"""memeval-serve's guard reads no header twice; its start refuses what anyone could pass (issue 41, part 3).

Against a real `memeval-serve` process (variant=bm25, a bearer token): a request sending Host,
Content-Type, Origin or Authorization more than once is a 400 before the service is touched (the guard
read the last one: `Host: evil.test` then `Host: 127.0.0.1` passed); each sent once still passes. At
start, `--token-env` naming a token that is blank once stripped, and `--override-keys` naming a file that
is not UTF-8, are each exit 2 with one line.
"""

from __future__ import annotations

import http.client
import json
import subprocess
import sys

import pytest

from tests.live.test_serve_security import ENV, SCOPE, TOKEN, TOKEN_ENV, post, served
from tests.support import REPO

BODY = json.dumps({"scope": SCOPE, "memories": [{"id": "planted", "text": "planted memory"}]}).encode()


@pytest.fixture(scope="module")
def guarded():
    with served("variant=bm25", "tracking=none", "--token-env", TOKEN_ENV,
                "--allow-origin", "http://ui.example",
                headers={"Authorization": f"Bearer {TOKEN}"}) as (port, _, _log):  # fmt: skip
        yield port


def raw_post(port: int, headers: list[tuple[str, str]]) -> tuple[int, dict]:
    """A POST with exactly these header lines, repeats included (http.client sends what it is given)."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        connection.putrequest("POST", "/v1/memories/ingest", skip_host=True, skip_accept_encoding=True)
        for name, value in [*headers, ("Content-Length", str(len(BODY)))]:
            connection.putheader(name, value)
        connection.endheaders(BODY)
        response = connection.getresponse()
        return response.status, json.loads(response.read() or b"null")
    finally:
        connection.close()


def test_a_repeated_host_content_type_origin_or_authorization_is_400(guarded):
    port = guarded
    host, json_type, auth = f"127.0.0.1:{port}", "application/json", f"Bearer {TOKEN}"
    good = [("Host", host), ("Content-Type", json_type), ("Authorization", auth)]
    for repeated in [
        [("Host", "evil.test"), ("Host", host), ("Content-Type", json_type), ("Authorization", auth)],
        [
            ("Host", host),
            ("Content-Type", "text/plain"),
            ("Content-Type", json_type),
            ("Authorization", auth),
        ],
        [*good, ("Origin", "http://evil.example"), ("Origin", "http://ui.example")],
        [
            ("Host", host),
            ("Content-Type", json_type),
            ("Authorization", "Bearer wrong"),
            ("Authorization", auth),
        ],
    ]:
        status, answer = raw_post(port, repeated)
        name = next(n for n, _ in repeated if [m for m, _ in repeated].count(n) > 1)
        assert status == 400, (repeated, status, answer)
        assert f"more than one {name.lower()} header" in answer["error"], answer
    auth_header = {"Authorization": auth}
    assert post(port, "/v1/memories/count", {"scope": SCOPE}, auth_header)[1] == {"count": 0}  # none stored
    assert raw_post(port, good)[0] == 200  # each header once: the same request passes
    assert raw_post(port, [*good, ("Origin", "http://ui.example")])[0] == 200


def serve_start(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "experiments.serve.cli", "variant=bm25", "tracking=none", *args],
        cwd=REPO, env=env or ENV, capture_output=True, text=True, timeout=120,
    )  # fmt: skip


@pytest.mark.parametrize("blank", ["", "   ", "\t \n"])
def test_a_token_blank_once_stripped_is_refused_at_start_as_empty(blank):
    done = serve_start("--token-env", TOKEN_ENV, env={**ENV, TOKEN_ENV: blank})
    assert done.returncode == 2, done.stderr[-2000:]
    assert f"--token-env {TOKEN_ENV}: the token is empty" in done.stderr and "not set" not in done.stderr


def test_an_override_keys_file_that_is_not_utf8_is_one_line_exit_2(tmp_path):
    keys = tmp_path / "keys.yaml"
    keys.write_bytes(b"override_keys:\n  caf\xe9: stage.bm25.k1\n")  # Latin-1, not UTF-8
    done = serve_start("--override-keys", str(keys))
    assert done.returncode == 2, done.stderr[-2000:]
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and str(keys) in lines[0] and "not UTF-8" in lines[0], done.stderr[-2000:]
