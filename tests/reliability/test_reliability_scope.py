"""Scope isolation under every variant: a query never gets a memory of another scope (scope_leaks == 0).

Runs every variant in conf/variant/ (new ones are picked up automatically) through the runner
(`experiments.run.app.run_experiment`, the CLI's code path minus Hydra's main) and reads `scope_leaks`
from the metrics.json it writes. Fast: the tiny two-scope suite whose scopes hold the same texts, so
any cross-scope result is a leak. Slow: one suite per scope shape and loader (generated tiers with three
scopes, replayed access counts via the decay variant, spark25's projects, and two real BEAM 100K
conversations: enough scopes to leak between, without reranking 199 questions per variant). A generated
beam_synth suite is not run beside the real BEAM conversations: the same loader and scope shape, it only
doubled the BEAM runs (three of its runs were among the slow tier's five slowest, 93-210 s each at load 5).
The cross-encoder variants run with the MiniLM weights as an untrained CrossEncoder, and the learned
fusion variants with a fusion model of fixed coefficients (no trained model ships; their scores do not
matter for isolation); the cross-encoder and the bi-encoder's ONNX model are exported once for the module.
Cost cuts that keep what is checked: on the multi-scope suites the cross-encoder reranks the top 4
(keeps 4) instead of 16 (8) (reordering a query's own candidates cannot add a memory of another
scope; scoring pairs is most of these runs' time), the passage channel scores passages by BM25
instead of embedding them, the spark variants encode with torch (vectors the other variants share),
and a suite's variants share one process memo, as the jobs of a sweep do (suite loaded and indexed
once; the tiny-suite test covers the cold path and the ONNX encoder).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from experiments.configure.compose import CONF_DIR, compose_config
from experiments.run.app import run_experiment
from experiments.suites.jsonl import save_suite
from tests.support import BEAM_DIR, CACHE_DIR, REPO, tiny_suite

# `system` scores a live memory service, which needs one running: its scope isolation (hits of another
# scope counted and dropped) is tested against a real served variant in tests/live/test_live_system.py.
VARIANTS = sorted(p.stem for p in (CONF_DIR / "variant").glob("*.yaml") if p.stem != "system")


@pytest.fixture(scope="module")
def cross_encoder_dir(tmp_path_factory) -> Path:
    from sentence_transformers import CrossEncoder

    from retrieval.encoder import MINILM, resolve_model_path

    folder = tmp_path_factory.mktemp("ce") / "minilm-untrained-head"
    CrossEncoder(resolve_model_path(MINILM), num_labels=1, max_length=128).save(str(folder))
    # beside it, a learned fusion model over the hybrid's columns (the learned_fusion stage's sources)
    import numpy as np

    from retrieval.fusion_model import LinearFusionModel

    sources = ("bm25", "dense", "fused")
    ones = np.ones(3 * len(sources))
    model = LinearFusionModel(sources, 0 * ones, ones, np.linspace(1, 0.1, len(ones)), 0.0, {})
    model.save(folder.parent / "fusion.json")
    return folder


def run_variant(
    variant: str, suite_overrides: list[str], tmp: Path, ce_dir: Path, *, rerank_top_n: int | None = None
) -> dict:
    overrides = [
        f"variant={variant}",
        *suite_overrides,
        "tracking=none",
        "progress=false",
        f"cache_dir={tmp / 'cache'}",
        f"encoder.cache_dir={CACHE_DIR / 'embeddings'}",  # shared embeddings: no re-encoding per test
        f"encoder.export_dir={ce_dir.parent / 'exports'}",  # one ONNX export of the bi-encoder (spark)
    ]
    cfg = compose_config(overrides)
    extra = []
    if "cross_encoder" in cfg.stage:
        extra.append(f"stage.cross_encoder.scorer.model={ce_dir}")
        # one OpenVINO export of that model for the whole module (each export costs ~30 s of CPU)
        extra.append(f"stage.cross_encoder.scorer.export_dir={ce_dir.parent / 'exports'}")
        if rerank_top_n is not None:
            extra += [f"stage.cross_encoder.{key}={rerank_top_n}" for key in ("top_n", "top_k")]
    if cfg.variant.get("encoder_backend") not in (None, "torch") and rerank_top_n is not None:
        # multi-scope suites: torch's vectors, shared with the other variants (the spark variants' ONNX
        # encoder would embed each suite again; the tiny-suite test runs it)
        extra.append("variant.encoder_backend=torch")
    if "passage" in cfg.stage and rerank_top_n is not None:
        # multi-scope suites: passages scored by BM25, not embedded (the scopes split the passages the
        # same way for both scorers; the tiny-suite test runs the dense scorer)
        extra.append("stage.passage.scorer=bm25")
    if "learned_fusion" in cfg.stage:
        extra.append(f"stage.learned_fusion.model.path={ce_dir.parent / 'fusion.json'}")
    if "trec_run" in cfg.stage:  # another system's run over this suite: every memory of the query's scope
        extra.append(f"stage.trec_run.path={write_same_scope_run(cfg, tmp / 'system.trec')}")
    if "ranked_file" in cfg.stage:  # the same, as another harness's JSON mapping
        extra.append(f"stage.ranked_file.path={write_same_scope_mapping(cfg, tmp / 'system.json')}")
    if extra:
        cfg = compose_config([*overrides, *extra])
    run_dir = tmp / "runs" / variant
    # multirun: this process's memo (loaded suites, indexes) is reused, as between the jobs of a sweep
    run_experiment(cfg, run_dir, multirun=rerank_top_n is not None)
    return json.loads((run_dir / "metrics.json").read_text())


def same_scope_rankings(cfg) -> dict[str, list[str]]:
    """Every memory of each query's own scope (the first 100), as another system would rank them."""
    from experiments.configure.settings import load_suite_from_config

    suite = load_suite_from_config(cfg)
    return {
        q.id: [m.id for m in suite.memories if dict(m.scope) == dict(q.scope)][:100] for q in suite.queries
    }


def write_same_scope_run(cfg, path: Path) -> Path:
    lines = [
        f"{qid} Q0 {mid} {rank} {1.0 / rank} system"
        for qid, ids in same_scope_rankings(cfg).items()
        for rank, mid in enumerate(ids, 1)
    ]
    path.write_text("\n".join(lines) + "\n")
    return path


def write_same_scope_mapping(cfg, path: Path) -> Path:
    path.write_text(json.dumps(same_scope_rankings(cfg)))
    return path


def test_every_variant_config_is_covered():
    assert {"bm25", "dense", "hybrid", "exp05", "cross_encoder", "tiering", "decay"} <= set(VARIANTS)


@pytest.mark.parametrize("variant", VARIANTS)
def test_no_variant_returns_a_memory_of_another_scope_on_the_tiny_suite(variant, tmp_path, cross_encoder_dir):
    suite = save_suite(tiny_suite(), tmp_path / "tiny")
    metrics = run_variant(variant, ["suite=jsonl", f"suite.path={suite}"], tmp_path, cross_encoder_dir)
    assert metrics["suite"]["scopes"] == 2 and metrics["n_queries"] == 4
    assert metrics["scope_leaks"] == 0


@pytest.fixture(scope="module")
def suite_dirs(tmp_path_factory) -> dict[str, Path]:
    beam = tmp_path_factory.mktemp("beam100k-two-conversations")
    for conversation in ("1", "2"):  # a tier folder holding two of the real conversations
        (beam / conversation).symlink_to(BEAM_DIR / "100K" / conversation, target_is_directory=True)
    return {"beam": beam}


SUITES = {
    "tiered_synth": lambda dirs: ["suite=tiered_synth", "suite.observations=200", "suite.scopes=3"],
    "spark25": lambda dirs: ["suite=spark25", f"suite.path={REPO / 'datasets' / 'spark25'}"],
    "beam100k": lambda dirs: ["suite=beam", f"suite.path={dirs['beam']}"],
}


# On the multi-scope suites (torch vectors for every variant, see run_variant) these variants are another
# variant's pipeline under another name: run once, as that one (checked just below).
SAME_PIPELINE_AS = {"baseline": "hybrid", "spark_phase0": "hybrid"}


def test_the_variants_left_out_of_the_multi_scope_runs_are_the_pipelines_they_name():
    def config(variant: str) -> dict:
        from omegaconf import OmegaConf

        cfg = compose_config([f"variant={variant}", "++variant.encoder_backend=torch"])
        resolved = OmegaConf.to_container(cfg, resolve=True)
        resolved["variant"].pop("name")
        return resolved

    for alias, same in SAME_PIPELINE_AS.items():
        assert config(alias) == config(same), alias


@pytest.mark.slow
@pytest.mark.parametrize("variant", [v for v in VARIANTS if v not in SAME_PIPELINE_AS])
@pytest.mark.parametrize("suite", SUITES)  # the outer loop: a suite's variants run one after another
def test_no_variant_leaks_across_scopes_on_any_multi_scope_suite(
    suite, variant, tmp_path, cross_encoder_dir, suite_dirs
):
    metrics = run_variant(variant, SUITES[suite](suite_dirs), tmp_path, cross_encoder_dir, rerank_top_n=4)
    if suite != "spark25":
        assert metrics["suite"]["scopes"] >= 2
    assert metrics["scope_leaks"] == 0
