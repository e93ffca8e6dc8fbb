"""The OpenAI-compatible client against a real loopback server: retries, errors naming URL and query."""

from __future__ import annotations

import socket

import pytest

from experiments.answer.client import AnswerError, ChatEndpoint
from experiments.benchmarks.chat_stub import ChatStub

BODY = {"model": "m", "messages": [{"role": "user", "content": "ctx line\nQuestion: q"}], "temperature": 0}


def test_a_completion_carries_its_text_usage_and_model():
    with ChatStub(model="served-model") as stub:
        endpoint = ChatEndpoint(base_url=stub.base_url)
        reply = endpoint.complete(BODY, "query q1 (answer)")
        assert endpoint.models("check") == ["served-model"]
    assert reply.text == ChatStub.reply(BODY["messages"][0]["content"]) and reply.model == "served-model"
    assert reply.prompt_tokens == len(BODY["messages"][0]["content"].split()) and reply.completion_tokens >= 1


def test_a_503_is_retried_then_answered():
    with ChatStub(fail_first=2) as stub:
        reply = ChatEndpoint(base_url=stub.base_url, retries=2, backoff_s=0.01).complete(
            BODY, "query q1 (answer)"
        )
        assert len(stub.requests) == 3 and reply.text


def test_a_body_that_is_not_json_after_the_retries_names_the_url_and_query():
    with ChatStub(not_json=True) as stub:
        with pytest.raises(AnswerError) as err:
            ChatEndpoint(base_url=stub.base_url, retries=1, backoff_s=0.01).complete(
                BODY, "query q7 (answer)"
            )
        assert len(stub.requests) == 2
    message = str(err.value)
    assert (
        "query q7 (answer)" in message
        and f"{stub.base_url}/chat/completions" in message
        and "not JSON" in message
    )


def test_an_unreachable_endpoint_is_an_error_naming_it(monkeypatch):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    with pytest.raises(AnswerError) as err:
        ChatEndpoint(base_url=f"http://127.0.0.1:{port}/v1", retries=1, backoff_s=0.01).complete(
            BODY, "query q2 (answer)"
        )
    assert (
        f"127.0.0.1:{port}" in str(err.value)
        and "query q2" in str(err.value)
        and "after 1 retries" in str(err.value)
    )


def test_the_key_is_sent_from_the_environment_and_never_quoted(monkeypatch):
    monkeypatch.setenv("MEMEVAL_TEST_KEY", "sk-secret-123")
    with ChatStub(not_json=True) as stub:
        endpoint = ChatEndpoint(base_url=stub.base_url, api_key_env="MEMEVAL_TEST_KEY", retries=0)
        with pytest.raises(AnswerError) as err:
            endpoint.complete(BODY, "query q1 (answer)")
        assert stub.authorization == ["Bearer sk-secret-123"]
    assert "sk-secret-123" not in str(err.value) and "sk-secret-123" not in repr(endpoint)
