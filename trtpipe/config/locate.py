"""Where `conf/` and `recipes/` are: in a source checkout they sit next to the
package; in an installed wheel they are shipped inside it (`trtpipe/conf`,
`trtpipe/recipes`, see pyproject.toml). And which recipe file a name selects.

Decision (issue 32, item 9): a recipe file that cannot be read (not YAML, no package header,
unreadable) fails only the run that asks for it (`+recipe=NAME`, with its own reason); every
other run skips it with one warning naming the file, and `trtpipe --help` lists it as
unreadable. Before, one broken file in a TRTPIPE_RECIPES folder made every run exit 2.
"""

from __future__ import annotations

import os
from pathlib import Path

from trtpipe.errors import UserError

_PACKAGE_DIR = Path(__file__).resolve().parent.parent

# Decision: user recipe directories come from an environment variable so that a
# team can keep its recipes in its own repository without editing the package.
USER_RECIPES_ENV = "TRTPIPE_RECIPES"
GLOBAL_PACKAGE_HEADER = "# @package _global_"


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


def recipe_files() -> dict[str, Path]:
    """Recipe name -> the file `+recipe=NAME` selects (a later directory's file wins)."""
    return {path.stem: path for directory in recipe_dirs() for path in sorted(directory.glob("*.yaml"))}


def load_recipe(path: Path):
    """The recipe's config (an OmegaConf node); UserError naming the file when it cannot be one."""
    from omegaconf import OmegaConf

    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise UserError(f"recipe {path} cannot be read ({error})",
                        "make it a readable UTF-8 text file, or remove it from the recipe folder") from None
    if GLOBAL_PACKAGE_HEADER not in text.splitlines()[:5]:
        raise UserError(
            f"recipe {path} does not start with '{GLOBAL_PACKAGE_HEADER}'",
            "add that header line so the recipe overlays the whole config",
        )
    try:
        return OmegaConf.create(text)
    except Exception as error:  # OmegaConf raises several YAML error types
        raise UserError(f"recipe {path} is not valid YAML ({error})", "fix the YAML syntax") from None
