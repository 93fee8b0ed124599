"""Where `conf/` and `recipes/` are: in a source checkout they sit next to the
package; in an installed wheel they are shipped inside it (`trtpipe/conf`,
`trtpipe/recipes`, see pyproject.toml)."""

from __future__ import annotations

import os
from pathlib import Path

from trtpipe.errors import UserError

_PACKAGE_DIR = Path(__file__).resolve().parent.parent

# Decision: user recipe directories come from an environment variable so that a
# team can keep its recipes in its own repository without editing the package.
USER_RECIPES_ENV = "TRTPIPE_RECIPES"


def _shipped_dir(name: str, marker: str) -> Path:
    # Wheel first: inside the package. Then the checkout: next to the package.
    for candidate in (_PACKAGE_DIR / name, _PACKAGE_DIR.parent / name):
        if (candidate / marker).is_file():
            return candidate
    raise UserError(
        f"trtpipe's '{name}' directory was not found next to or inside {_PACKAGE_DIR}",
        "reinstall trtpipe (pip install .) so that conf/ and recipes/ are shipped with it",
    )


def conf_dir() -> Path:
    return _shipped_dir("conf", "config.yaml")


def recipe_file(name: str) -> Path | None:
    """The file recipe `name` is read from: the last recipe directory that has `name.yaml`
    (the one config/store.py registers last, which wins)."""
    found = [directory / f"{name}.yaml" for directory in recipe_dirs() if (directory / f"{name}.yaml").is_file()]
    return found[-1] if found else None


def recipe_dirs() -> list[Path]:
    """Shipped recipes first, then user directories; a later directory's recipe of
    the same name overrides an earlier one."""
    dirs = [_shipped_dir("recipes", "fp32.yaml")]
    for entry in os.environ.get(USER_RECIPES_ENV, "").split(os.pathsep):
        if not entry:
            continue
        path = Path(entry).expanduser().resolve()
        if not path.is_dir():
            raise UserError(
                f"{USER_RECIPES_ENV} names '{entry}', which is not a directory",
                f"point {USER_RECIPES_ENV} at a directory of recipe YAML files",
            )
        dirs.append(path)
    return dirs
