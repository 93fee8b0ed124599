"""Registration of schemas and recipes in Hydra's ConfigStore.

Decision: recipes live in `recipes/` (a fixed layout) but are selected as the
config group `recipe` (`+recipe=NAME`). Registering each recipe YAML in the
ConfigStore gives them that group name from a checkout, from a wheel and from a
user directory alike, and keeps `--info`, `--cfg` and shell completion working.
"""

from __future__ import annotations

import logging
from pathlib import Path

from hydra.core.config_store import ConfigStore

from trtpipe.config import schema
from trtpipe.config.locate import load_recipe, recipe_files
from trtpipe.errors import UserError
from trtpipe.safe_text import safe_text

log = logging.getLogger("trtpipe")

RECIPE_GROUP = "recipe"

_STAGE_SCHEMAS = {
    "sanitize": schema.SanitizeConfig,
    "upgrade_opset": schema.UpgradeOpsetConfig,
    "precision": schema.PrecisionConfig,
    "promote_outputs": schema.PromoteOutputsConfig,
    "build": schema.BuildConfig,
    "validate": schema.ValidateConfig,
}


def register_configs() -> list[Path]:
    """Idempotent: storing the same names again replaces them. A recipe file that cannot be read
    is skipped with one warning (locate.py says why); `+recipe=` of its name fails with its reason
    (config/check.py). Returns the skipped files."""
    from trtpipe.cache.cache_home import register_cache_resolver

    register_cache_resolver()  # cache.dir's default: ${trtpipe.cache_home:}
    store = ConfigStore.instance()
    skipped = []
    store.store(name="trtpipe_schema", node=schema.TrtpipeConfig)
    for group, node in _STAGE_SCHEMAS.items():
        store.store(group=group, name="schema", node=node)
    for name, path in recipe_files().items():
        try:
            node = load_recipe(path)
        except UserError as error:
            store.repo.get(RECIPE_GROUP, {}).pop(f"{name}.yaml", None)  # never an earlier or stale one instead
            reason = " ".join(error.problem.split()).replace(f"recipe {path} ", "", 1)
            skipped.append(path)
            log.warning("trtpipe: warning: recipe file %s is skipped (only +recipe=%s would use it): it %s",
                        safe_text(path), safe_text(name), safe_text(reason))
            continue
        store.store(group=RECIPE_GROUP, name=name, node=node, package="_global_")
    return skipped
