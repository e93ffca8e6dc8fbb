"""A YAML adapter can never pool the suite's scopes into one, nor flood the console (issue 41, part 2).

Against the loopback collection service of test_live_http_templates.py, through the whole run path
(SystemRetriever over the tiny two-scope suite): `{scope.<name>}` of a key the scopes lack is refused
before any request, naming the placeholder and the scope's keys (it was sent as "" and every scope landed
in one collection); a `setup` capture that reads null or "" is refused naming the setup call, the scope
and the JSON path (it sent `/collections//add` for every scope); an error quotes a huge request path
shortened, as it quotes bodies; a missing or directory `ca_file` is a config error naming the key and the
path, not "the service is not reachable".
"""

from __future__ import annotations

import pytest

from experiments.configure.build import checked_pipeline
from experiments.configure.check import ConfigError
from experiments.configure.compose import compose_config
from experiments.systems.http import HttpSystem
from experiments.systems.protocol import LiveSystemError
from retrieval.stage import FieldError
from tests.live.test_live_http_templates import CollectionService, collection_adapter, run_tiny


@pytest.fixture()
def service():
    server = CollectionService()
    yield server
    server.close()


class AnsweringSetup(CollectionService):
    """The collection service, but its setup answers the collection id given (null, "", a huge one)."""

    def __init__(self, collection_id):
        super().__init__()
        self.collection_id = collection_id

    def respond(self, method, path, body):
        if method == "POST" and path == "/collections":
            return 200, {"id": self.collection_id}
        return super().respond(method, path, body)


def test_a_scope_field_the_scopes_lack_is_refused_before_any_request(service):
    adapter = collection_adapter(service.url)
    setup = {**adapter.endpoints["setup"], "body": {"name": "memeval-{scope.user_id}"}}
    with pytest.raises(LiveSystemError) as caught:
        run_tiny(collection_adapter(service.url, endpoints={**adapter.endpoints, "setup": setup}))
    message = str(caught.value)
    assert "system.adapter.endpoints.setup names {scope.user_id}" in message, message
    assert "its keys: conversation" in message and "nothing was sent" in message
    assert service.requests == []  # not one collection made, nothing ingested
    assert service.collections == {}


def test_a_scope_field_in_the_memory_template_is_checked_too(service):
    memory = {"id": "{id}", "text": "{text}", "meta": {"user": "{scope.user}"}}
    with pytest.raises(LiveSystemError, match=r"system.adapter.memory names \{scope.user\}"):
        run_tiny(collection_adapter(service.url, memory=memory))
    assert service.requests == []


@pytest.mark.parametrize("captured", [None, ""])
def test_a_setup_capture_that_reads_null_or_empty_names_the_call_scope_and_path(captured):
    server = AnsweringSetup(captured)
    try:
        with pytest.raises(LiveSystemError) as caught:
            run_tiny(collection_adapter(server.url))
        message = str(caught.value)
        assert message.startswith("setup of scope {'conversation': 'c1'}: capture 'collection'"), message
        assert "JSON path 'id'" in message and repr(captured) in message
        assert server.requests[-1][:2] == ("POST", "/collections")  # the setup, and nothing after it
        assert not [r for r in server.requests if r[1].endswith("/add")]  # no /collections//add
    finally:
        server.close()


def test_an_error_quotes_a_huge_request_path_shortened():
    server = AnsweringSetup("x" * 2_000_000)  # a service-made id of 2 MB: its request line is refused
    try:
        with pytest.raises(LiveSystemError) as caught:
            run_tiny(collection_adapter(server.url))
    finally:
        server.close()
    message = str(caught.value)
    assert message.startswith("ingest of scope") and "/collections/xxxx" in message, message[:500]
    assert len(message) < 2000, len(message)


@pytest.mark.parametrize("kind", ["missing", "a directory"])
def test_a_missing_or_directory_ca_file_is_a_config_error_naming_key_and_path(tmp_path, kind):
    path = tmp_path / "ca.pem"
    if kind == "a directory":
        path.mkdir()
    with pytest.raises(FieldError) as caught:
        HttpSystem(base_url="https://127.0.0.1:9", endpoints=collection_adapter("http://x").endpoints,
                   ca_file=str(path))  # fmt: skip
    assert caught.value.problems == [
        ("ca_file", f"{path} is {kind}: give a PEM file of the CAs to trust (or null)")
    ]
    with pytest.raises(ConfigError) as composed:
        checked_pipeline(
            compose_config(["variant=system", "tracking=none", f"system.adapter.ca_file={path}"])
        )
    (problem,) = [p for p in composed.value.problems if "ca_file" in p]
    assert problem.startswith("stage.system.system.ca_file:") and str(path) in problem, problem
    assert "not reachable" not in problem
