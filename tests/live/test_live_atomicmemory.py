"""The shipped AtomicMemory-shaped config (conf/system/atomicmemory.yaml) against memeval-serve, in process:
a user id for any suite's scope, the memory's role carried to the service, and a served stage that reads a
field no memory carries is named, never silent (issue 41, part 4). The same through a running server on
BEAM 100K: tests/live/test_live_serve.py; the README's one-liner: tests/project/test_readme_commands.py."""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf

from experiments.configure.compose import compose_config
from experiments.serve.http_face import from_atomicmemory
from experiments.serve.service import MemoryService
from experiments.systems.templates import fill, memory_records, scope_values
from retrieval.types import Memory
from tests.live.test_live_serve import ENV, health, memeval_run, quality, served


def _adapter():
    cfg = compose_config(["variant=system", "system=atomicmemory", "tracking=none"])
    return OmegaConf.to_container(cfg.system.adapter, resolve=True)


def _body(adapter: dict, operation: str, scope: dict, memories: list[Memory] = ()) -> dict:
    values = {**scope_values(scope), "memories": memory_records(adapter["memory"], scope, memories)}
    return fill(adapter["endpoints"][operation]["body"], values)


def test_the_user_id_is_filled_for_any_suites_scope_and_differs_between_scopes():
    adapter = _adapter()
    scopes = [{"project": "spark"}, {"conversation": "1"}, {"conversation": "2"}, {"user": "a", "sess": "b"}]
    users = [_body(adapter, "reset", s)["user_id"] for s in scopes]
    assert all(isinstance(u, str) and u for u in users), users
    assert len(set(users)) == len(users)


def _memory(mid: str, text: str, role: str | None) -> Memory:
    return Memory(id=mid, text=text, scope={"conversation": "1"}, created_at="2026-01-01", role=role)


def test_the_role_reaches_memeval_serve_and_a_stage_that_finds_none_is_named(capsys):
    adapter = _adapter()
    service = MemoryService.from_overrides(["variant=exp05", "tracking=none"])
    said = [_memory("m1", "Always answer in French.", "user"), _memory("m2", "Sure, I will.", "assistant")]
    body = from_atomicmemory(_body(adapter, "ingest", {"conversation": "1"}, said))
    service.ingest(body["scope"], body["memories"])
    stored = service._scopes[next(iter(service._scopes))].memories
    assert [m.role for m in stored] == ["user", "assistant"]
    assert service.warnings() == [] and "warning" not in capsys.readouterr().err

    unsaid = [_memory("m3", "Always answer in French.", None)]
    body = from_atomicmemory(_body(adapter, "ingest", {"conversation": "2"}, unsaid))
    service.ingest(body["scope"], body["memories"])
    (warning,) = service.warnings()
    assert "instruction_tagging" in warning and "`role`" in warning and "1 scope" in warning
    assert warning in capsys.readouterr().err
    service.ingest(body["scope"], [])  # said once per stage and field, not on every ingest
    assert "warning" not in capsys.readouterr().err


def test_a_variant_whose_stages_read_no_memory_field_warns_of_nothing():
    service = MemoryService.from_overrides(["variant=hybrid", "tracking=none"])
    service.ingest({"conversation": "1"}, [{"id": "m1", "text": "no role here"}])
    assert service.warnings() == []


@pytest.mark.slow
def test_served_exp05_through_atomicmemory_gives_the_in_process_run_trec_on_beam_100k_conversation_1(
    tmp_path, beam_100k
):
    suite = ["suite=beam", f"suite.path={beam_100k / '1'}"]
    memeval_run(tmp_path, tmp_path / "in_process", *suite, "variant=exp05")
    system = ["variant=system", "variant.name=exp05", "system=atomicmemory"]
    with served("variant=exp05") as (url, _):
        # memeval-serve started without --token-env checks no token: any value of the variable does
        with pytest.MonkeyPatch.context() as env:
            env.setitem(ENV, "ATOMICMEMORY_API_KEY", "any")
            memeval_run(tmp_path, tmp_path / "served", *suite, *system, f"system.base_url={url}")
        assert health(url)["warnings"] == []  # instruction_tagging found the user messages' roles
    assert (tmp_path / "served" / "run.trec").read_bytes() == (
        tmp_path / "in_process" / "run.trec"
    ).read_bytes()
    assert quality(tmp_path / "served") == quality(tmp_path / "in_process")
