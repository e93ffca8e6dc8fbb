"""A variant's name is its file name: `variant=exp05` runs as `exp05` (run.trec's tag, the MLflow run name).

Step of composing a run config. conf/config.yaml's defaults hold `variant_name@variant: ${variant}`, the
chosen variant's name interpolated into a config group that this config source answers for any name with
`{name: <the choice>}`, so a variant file does not restate its own name, and every way of composing (the
@hydra.main apps, compose(), a sweep over `variant=a,b`) sees it. `variant.name=label` still renames a run
(a study's row labels), as does a `variant: {name: ...}` in a variant file.

Hydra finds the source and the search-path entry that points at it (`memeval-variant-name://`, appended by
FileNameSearchPath, so a user's own `hydra.searchpath=[...]` keeps it) through its plugin discovery
(hydra_plugins/memeval_config).
"""

from __future__ import annotations

from hydra.core.config_search_path import ConfigSearchPath
from hydra.core.object_type import ObjectType
from hydra.plugins.config_source import ConfigResult, ConfigSource
from hydra.plugins.search_path_plugin import SearchPathPlugin
from omegaconf import OmegaConf

# `<group>_name/<choice>` -> {name: <choice>}, for the groups whose options are named by their file.
GROUPS = ("variant_name", "study_name")


class FileNameSource(ConfigSource):
    """Answers `<group>_name/<choice>` (GROUPS) with `{name: <choice>}`: a variant or plan named by file."""

    @staticmethod
    def scheme() -> str:
        return "memeval-variant-name"

    def load_config(self, config_path: str) -> ConfigResult:
        name = self._normalize_file_name(config_path).split("/", 1)[1].removesuffix(".yaml")
        return ConfigResult(
            config=OmegaConf.create({"name": name}),
            path=f"{self.scheme()}://{self.path}",
            provider=self.provider,
            header={"package": None},
        )

    def available(self) -> bool:
        return True

    def is_group(self, config_path: str) -> bool:
        return config_path.strip("/") in GROUPS

    def is_config(self, config_path: str) -> bool:
        group, _, name = config_path.strip("/").partition("/")
        return group in GROUPS and bool(name)

    def list(self, config_path: str, results_filter: ObjectType | None) -> list[str]:
        if config_path.strip("/") == "" and results_filter in (None, ObjectType.GROUP):
            return list(GROUPS)
        return []  # any name is answered; none is listed


class FileNameSearchPath(SearchPathPlugin):
    def manipulate_search_path(self, search_path: ConfigSearchPath) -> None:
        search_path.append(provider="memeval", path=f"{FileNameSource.scheme()}://")
