"""Registration of schemas and recipes in Hydra's ConfigStore.

Decision: recipes live in `recipes/` (a fixed layout) but are selected as the
config group `recipe` (`+recipe=NAME`). Registering each recipe YAML in the
ConfigStore gives them that group name from a checkout, from a wheel and from a
user directory alike, and keeps `--info`, `--cfg` and shell completion working.
"""

from __future__ import annotations

from pathlib import Path

from hydra.core.config_store import ConfigStore
from omegaconf import OmegaConf

from trtpipe.config import schema
from trtpipe.config.locate import recipe_dirs
from trtpipe.errors import UserError

RECIPE_GROUP = "recipe"
GLOBAL_PACKAGE_HEADER = "# @package _global_"

_STAGE_SCHEMAS = {
    "sanitize": schema.SanitizeConfig,
    "upgrade_opset": schema.UpgradeOpsetConfig,
    "precision": schema.PrecisionConfig,
    "promote_outputs": schema.PromoteOutputsConfig,
    "build": schema.BuildConfig,
    "validate": schema.ValidateConfig,
}


def register_configs() -> None:
    """Idempotent: storing the same names again replaces them."""
    from trtpipe.cache.cache_home import register_cache_resolver

    register_cache_resolver()  # cache.dir's default: ${trtpipe.cache_home:}
    store = ConfigStore.instance()
    store.store(name="trtpipe_schema", node=schema.TrtpipeConfig)
    for group, node in _STAGE_SCHEMAS.items():
        store.store(group=group, name="schema", node=node)
    for directory in recipe_dirs():
        for path in sorted(directory.glob("*.yaml")):
            store.store(group=RECIPE_GROUP, name=path.stem, node=_load_recipe(path), package="_global_")


def _load_recipe(path: Path):
    text = path.read_text(encoding="utf-8")
    if GLOBAL_PACKAGE_HEADER not in text.splitlines()[:5]:
        raise UserError(
            f"recipe {path} does not start with '{GLOBAL_PACKAGE_HEADER}'",
            "add that header line so the recipe overlays the whole config",
        )
    try:
        return OmegaConf.create(text)
    except Exception as error:  # OmegaConf raises several YAML error types
        raise UserError(f"recipe {path} is not valid YAML ({error})", "fix the YAML syntax") from error
