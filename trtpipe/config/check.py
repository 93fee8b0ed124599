"""The strict check of a composed config, and one-line messages for config errors.

Decision: Hydra lets keys added with `+` past the dataclass schema (it composes
them under `open_dict`). Merging the composed config into the schema once more
catches them, with the full key path, before anything runs.
"""

from __future__ import annotations

from omegaconf import DictConfig, ListConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from trtpipe.config.closest import closest
from trtpipe.config.schema import TrtpipeConfig, repair_settings
from trtpipe.errors import UserError


def check_config(cfg: DictConfig, overrides: list[str] | None = None) -> None:
    """Raise UserError for a key the schema does not know or a value of the wrong type.

    With `overrides` given, the schema merge runs only when one of them adds a key
    (`+key=`, `++key=`; selecting a recipe with `+recipe=` is a group choice): every
    other way in is checked by Hydra's own composition against the schemas already.
    """
    if overrides is None or any(_adds_key(o) for o in overrides):
        _check_schema(cfg)
    try:
        _check_values(cfg)
    except OmegaConfBaseException as error:  # e.g. `key=${nope}`: found by bench/fuzz/fuzz.py
        raise config_error(error) from None


def _adds_key(override: str) -> bool:
    return override.startswith("+") and not override.startswith("+recipe=")


def _check_schema(cfg: DictConfig) -> None:
    plain = OmegaConf.to_container(cfg, resolve=False)
    plain.pop("hydra", None)
    plain.pop("recipe", None)  # a recipe overlays `_global_`; an empty `recipe` key may remain
    try:
        OmegaConf.merge(OmegaConf.structured(TrtpipeConfig), plain)
    except OmegaConfBaseException as error:
        raise config_error(error) from error


def _check_values(cfg: DictConfig) -> None:
    """Values the schema's types cannot express: enumerations and regexes."""
    from trtpipe.precision.network.rules import compile_rules

    _check_input_specs(cfg)
    _check_tolerances(cfg)
    _check_cache(cfg)
    if cfg.get("run") is not None:
        _one_of("run.artifacts", cfg.run.artifacts, ("all", "final"))
    _check_build(cfg)
    precision = cfg.get("precision")
    if precision is None:
        return
    _one_of("precision.default", precision.default, ("fp16", "bf16", "fp32"))
    _one_of("precision.on_unmatched", precision.on_unmatched, ("error", "warn"))
    _one_of("precision.auto.constants", precision.auto.constants, ("keep_fp32", "saturate", "off"))
    repair = precision.get("repair")
    repair_settings(OmegaConf.to_container(repair, resolve=True) if isinstance(repair, DictConfig) else repair)
    compile_rules(OmegaConf.to_container(precision.rules, resolve=True))


def _check_build(cfg: DictConfig) -> None:
    """The backend and the RTX target: before any stage runs, so nothing is half-written."""
    from trtpipe.config.build_schema import BACKENDS, checked_choice, checked_rtx_target

    build = cfg.get("build")
    if build is None:
        return
    plain = OmegaConf.to_container(build, resolve=True)
    checked_choice(plain, "backend", BACKENDS)
    checked_rtx_target(plain)  # a wrong value is refused with either backend, not kept for later


def _check_cache(cfg: DictConfig) -> None:
    from trtpipe.cache.manage import parse_size

    cache = cfg.get("cache")
    if cache is not None and cache.get("max_size") is not None:
        parse_size(cache.max_size, "cache.max_size")
    if cache is not None and cache.get("remote") is not None:
        from trtpipe.cache.remote.location import REMOTE_MODES, parse_remote

        parse_remote(cache.remote)
        _one_of("cache.remote_mode", cache.remote_mode, REMOTE_MODES)


def _check_tolerances(cfg: DictConfig) -> None:
    from trtpipe.config.tolerance_check import check_tolerances

    def plain(node):
        return OmegaConf.to_container(node, resolve=True) if isinstance(node, DictConfig) else node

    precision = cfg.get("precision")
    search = precision.get("search") if isinstance(precision, DictConfig) else None
    check_tolerances(plain(cfg.get("validate")), plain(search))
    validate = cfg.get("validate")
    share = validate.get("min_compared") if isinstance(validate, DictConfig) else None
    if share is not None and not 0.0 <= float(share) <= 1.0:
        raise UserError(f"validate.min_compared is {share}, not a share of positions between 0 and 1",
                        "validate.min_compared=0.5 (0 compares whatever is finite, however little)")


def _check_data_path(data) -> None:
    """data.path is a path or a list of paths (issue 30, item 5); a mapping or a nested list is refused
    here, with the key, rather than failing as a path later. A scalar Hydra read as a number (a file
    named `5`) is a path: the schema typed it str before."""
    path = data.get("path") if data is not None else None
    if path is None or not isinstance(path, (DictConfig, ListConfig)):
        return
    if isinstance(path, ListConfig) and not any(isinstance(entry, (DictConfig, ListConfig)) for entry in path):
        return
    raise UserError(f"data.path is {OmegaConf.to_container(path)!r}, not a path or a list of paths",
                    "give an .npz or Polygraphy JSON file, a folder of .npz files, or a list of .npz files "
                    "and folders, e.g. 'data.path=[a.npz,b.npz]'")


def _check_input_specs(cfg: DictConfig) -> None:
    """Each data.inputs entry against InputSpec, with the full key."""
    from trtpipe.config.schema import InputSpec

    data = cfg.get("data")
    _check_data_path(data)
    length = data.get("sequence_length") if data is not None else None
    if length is not None and int(length) < 1:
        raise UserError(f"data.sequence_length is {length}, not a length", "data.sequence_length=128")
    for name, spec in ((data.get("inputs") if data is not None else None) or {}).items():
        key = f"data.inputs.{name}"
        if not isinstance(spec, DictConfig):
            raise UserError(f"{key} is {spec!r}, not an input spec", "write {low: ..., high: ..., dtype: ..., shape: [...]}")
        try:
            OmegaConf.merge(OmegaConf.structured(InputSpec), spec)
        except OmegaConfBaseException as error:
            detail = " ".join(str(getattr(error, "msg", error)).split("full_key:")[0].split())
            raise UserError(f"{key} is not a valid input spec: {detail}",
                            "an input spec has low, high, dtype and shape") from None


def _one_of(key: str, value, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        from trtpipe.config.override_text import choice_fix

        raise UserError(f"config value of '{key}' is {value!r}", choice_fix(key, value, allowed))


def config_error(error: BaseException) -> UserError:
    """Turn an OmegaConf or Hydra composition error into a one-line UserError.

    Decision (issue 33 item 7): an error in a recipe's YAML (Hydra says "In 'recipe/NAME'")
    names the recipe file first: the key is the file's, not the command line's, and with
    TRTPIPE_RECIPES the same name may be in several directories."""
    user_error = _config_error(error)
    recipe = _recipe_in(error)
    if recipe is None:
        return user_error
    return UserError(f"recipe file {recipe}: {user_error.problem}", user_error.fix)


def _recipe_in(error: BaseException | None):
    """The file of the recipe Hydra was merging when `error` was raised, if any."""
    import re

    from trtpipe.config.locate import recipe_file

    seen = 0
    while error is not None and seen < 10:
        found = re.match(r"In 'recipe/([^'/]+)'", str(error))
        if found:
            try:
                return recipe_file(found.group(1))
            except UserError:  # a bad TRTPIPE_RECIPES is reported by the registration, not here
                return None
        error = error.__cause__ or error.__context__
        seen += 1
    return None


def _config_error(error: BaseException) -> UserError:
    from trtpipe.config.append_hint import append_hint, typed_override

    omega = _find_omegaconf_error(error)
    full_key = getattr(omega, "full_key", None) if omega is not None else None
    hint = append_hint(str(error))  # `key=value` that needs a leading +: the override that works
    if hint is not None and not (full_key and _valid_keys(full_key.rpartition(".")[0])):
        return hint  # (a key a schema does not have is a typo: "did you mean" below)
    if full_key:
        return _key_error(omega, typed_override(str(error)))
    # The whole message on one line: Hydra's later lines list the available options.
    first_line = " ".join(str(error).split()) or type(error).__name__
    if "Could not find 'recipe/" in str(error):
        return _unknown_recipe(str(error))
    launcher = _missing_launcher(str(error))
    if launcher is not None:
        return launcher
    return UserError(f"config: {first_line}", "check the override's spelling; `trtpipe --cfg job` prints the config")


# hydra/launcher=NAME -> the trtpipe extra that installs that Hydra plugin (pyproject.toml).
LAUNCHER_EXTRAS = {"joblib": "joblib", "submitit_local": "submitit", "submitit_slurm": "submitit", "ray": "ray",
                   "ray_aws": "ray"}


def _missing_launcher(message: str) -> UserError | None:
    """`hydra/launcher=ray` without its plugin: Hydra's "Could not find" names the group, not the
    install; the spelling is right, the plugin is missing."""
    import re

    found = re.search(r"Could not find 'hydra/launcher/([^']*)'", message)
    if not found or found.group(1) not in LAUNCHER_EXTRAS:
        return None
    name = found.group(1)
    from trtpipe.errors import pip_install_extra

    return UserError(f"hydra/launcher={name}: Hydra's {name} launcher plugin is not installed",
                     pip_install_extra(LAUNCHER_EXTRAS[name]))


def _unknown_recipe(message: str) -> UserError:
    """`+recipe=transformer_fp61`: name the recipe, the closest one as a pasteable fix, then the
    rest; Hydra's config search path is its internals, not the user's problem (issue 24, item 6)."""
    import re

    asked = (re.search(r"Could not find 'recipe/([^']*)'", message) or [None, "?"])[1]
    unreadable = _unreadable_recipe(asked)
    if unreadable is not None:  # the file is there but was skipped: say why, not "there is no recipe"
        return unreadable
    options = _registered_recipes()
    close = closest(asked, options, n=1, cutoff=0.5)
    if close:
        return UserError(f"there is no recipe '{asked}' (the closest is '{close[0]}')",
                         f"replace '+recipe={asked}' with '+recipe={close[0]}' (recipes: {', '.join(options)}; "
                         "trtpipe --help describes them)")
    return UserError(f"there is no recipe '{asked}'",
                     f"use one of the recipes ({', '.join(options)}) or add your recipe directory to TRTPIPE_RECIPES")


def _unreadable_recipe(name: str) -> UserError | None:
    """The reason the recipe file `+recipe=name` selects could not be registered, if there is one."""
    from trtpipe.config.locate import load_recipe, recipe_files

    path = recipe_files().get(name)
    if path is None:
        return None
    try:
        load_recipe(path)
    except UserError as error:
        return error
    return None


def _key_error(error: OmegaConfBaseException, typed: str | None = None) -> UserError:
    """`typed`: the override as the user typed it, when Hydra's message quotes it."""
    full_key = error.full_key
    # OmegaConf appends "full_key: ... object_type=..." lines; the key is named separately.
    message = " ".join(str(getattr(error, "msg", error)).split("full_key:")[0].split())
    if "not in" in message or "not in struct" in message:
        parent, _, leaf = full_key.rpartition(".")
        valid = _valid_keys(parent)
        if not valid and parent:  # a mapping whose keys are the user's (data.inputs, precision.rules)
            return UserError(
                f"config key '{full_key}' is a new entry of '{parent}'",
                f"add new entries with a leading ++, e.g. '++{full_key}=VALUE'",
            )
        close = closest(leaf, valid)
        hint = f"did you mean {' or '.join(repr(c) for c in close)}? " if close else ""
        if close and typed and typed.startswith(full_key + "="):  # the typed override, key corrected
            from trtpipe.config.override_text import shell_quoted

            corrected = f"{parent + '.' if parent else ''}{close[0]}{typed[len(full_key):]}"
            hint = f"replace {shell_quoted(typed)} with {shell_quoted(corrected)} ({hint.strip()}); "
        where = f"under '{parent}'" if parent else "at the top level"
        return UserError(
            f"config key '{full_key}' is not a trtpipe setting",
            f"{hint}valid keys {where} are: {', '.join(valid)}",
        )
    return UserError(f"config value of '{full_key}' is invalid: {message}", "give a value of the type the key expects")


def _valid_keys(parent: str) -> list[str]:
    node = OmegaConf.structured(TrtpipeConfig)
    for part in filter(None, parent.split(".")):
        node = node.get(part) if isinstance(node, DictConfig) else None
    return sorted(node.keys()) if isinstance(node, DictConfig) else []


def _find_omegaconf_error(error: BaseException | None) -> OmegaConfBaseException | None:
    seen = 0
    while error is not None and seen < 10:
        if isinstance(error, OmegaConfBaseException):
            return error
        error = error.__cause__ or error.__context__
        seen += 1
    return None


def _registered_recipes() -> list[str]:
    from hydra.core.config_store import ConfigStore

    from trtpipe.config.store import RECIPE_GROUP

    return sorted(name.removesuffix(".yaml") for name in ConfigStore.instance().list(RECIPE_GROUP))
