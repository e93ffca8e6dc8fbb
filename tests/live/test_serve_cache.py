"""One embedding cache for memeval-serve and memeval-run (issue 41: a served variant re-encoded BEAM 100K
that an in-process run had just embedded, into another folder): MEMEVAL_CACHE_DIR names the cache for
both wherever each starts, and the server says which folder it embeds into."""

from __future__ import annotations

from pathlib import Path

from hydra.utils import instantiate

from experiments.configure.compose import compose_config
from experiments.serve.service import MemoryService


def test_memeval_cache_dir_is_one_cache_for_serve_and_run_from_any_folder(tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    monkeypatch.setenv("MEMEVAL_CACHE_DIR", str(cache))
    (tmp_path / "serve").mkdir()
    (tmp_path / "run").mkdir()
    monkeypatch.chdir(tmp_path / "serve")
    served = MemoryService.from_overrides(["variant=exp05", "tracking=none"]).embedding_caches()
    monkeypatch.chdir(tmp_path / "run")
    cfg = compose_config(["variant=exp05", "suite=beam", "tracking=none"])
    run = Path(instantiate(cfg.stage.dense, _convert_="all").encoder.cache_dir).resolve()
    assert served == [str(run)] == [str(cache / "embeddings")]
    assert cfg.cache_dir == str(cache)


def test_without_it_the_cache_is_the_working_folders_as_before(tmp_path, monkeypatch):
    monkeypatch.delenv("MEMEVAL_CACHE_DIR", raising=False)
    monkeypatch.chdir(tmp_path)
    served = MemoryService.from_overrides(["variant=dense", "tracking=none"]).embedding_caches()
    assert served == [str(tmp_path.resolve() / ".memeval_cache" / "embeddings")]
