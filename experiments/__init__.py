"""memeval's harness: suites, metrics, statistics, the runner, tracking, gate, reports, benchmarks."""

from pathlib import Path

from omegaconf import OmegaConf

PROJECT_ROOT = Path(__file__).resolve().parents[1]

# `${project_root:}` in configs: data that ships with the project resolves from any working directory.
if not OmegaConf.has_resolver("project_root"):
    OmegaConf.register_new_resolver("project_root", lambda: str(PROJECT_ROOT))


# `${shipped_data:spark25}`: a dataset that ships with memeval, in a checkout or an installed wheel
# (experiments/shipped_data.py).
def _shipped_data(name: str) -> str:
    from experiments.shipped_data import shipped_dataset

    return str(shipped_dataset(name))


if not OmegaConf.has_resolver("shipped_data"):
    OmegaConf.register_new_resolver("shipped_data", _shipped_data)
# `${subdir:${cache_dir},embeddings}`: a folder under the cache, or null when caching is off
# (plain `${cache_dir}/embeddings` would turn `cache_dir=null` into a folder named "None").
if not OmegaConf.has_resolver("subdir"):
    OmegaConf.register_new_resolver("subdir", lambda base, name: None if base is None else f"{base}/{name}")


# `${file_sha256:${.path}}`: a file's content hash in the config, so the config hash (resume) and the
# stage's fingerprint (caches) change when the file does (the TREC run channel, conf/stage/trec_run.yaml).
def _file_sha256(path: str) -> str:
    from retrieval.retrievers.trec_run import file_sha256

    return file_sha256(path)


if not OmegaConf.has_resolver("file_sha256"):
    OmegaConf.register_new_resolver("file_sha256", _file_sha256)
