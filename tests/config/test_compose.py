"""Config composition: every recipe, the strict key check, recipes from a user directory."""

from __future__ import annotations


import pytest

from trtpipe.config.locate import conf_dir, recipe_dirs
from trtpipe.config.preflight import compose_checked, preflight
from trtpipe.config.store import register_configs
from trtpipe.errors import UserError

SHIPPED_RECIPES = sorted(p.stem for p in recipe_dirs()[0].glob("*.yaml"))


@pytest.fixture(autouse=True)
def registered(monkeypatch):
    monkeypatch.delenv("TRTPIPE_RECIPES", raising=False)
    register_configs()


def compose(*overrides: str):
    return compose_checked(conf_dir(), list(overrides))


def test_the_shipped_recipes_are_the_documented_ones():
    assert {"transformer_fp16", "nafnet_fp16", "mixed_precision", "fp32"} <= set(SHIPPED_RECIPES)


@pytest.mark.parametrize("recipe", SHIPPED_RECIPES)
def test_every_recipe_composes_and_names_a_builtin_model(recipe):
    cfg = compose(f"+recipe={recipe}")
    assert cfg.model.path is None
    assert cfg.model.builtin in {"transformer", "nafnet", "mixed_precision"}
    assert list(cfg.stages)


def test_recipe_sets_values_and_inherits():
    assert compose("+recipe=nafnet_fp16").model.builtin == "nafnet"
    assert compose("+recipe=mixed_precision").sanitize.fold_constants is False
    # fp32 inherits transformer_fp16's model.
    assert compose("+recipe=fp32").model.builtin == "transformer"


def test_command_line_overrides_win_over_recipe():
    assert compose("+recipe=transformer_fp16", "upgrade_opset.target=18").upgrade_opset.target == 18


def test_cache_dir_follows_the_environment_variable(monkeypatch, tmp_path):
    monkeypatch.delenv("TRTPIPE_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert compose().cache.dir == str(tmp_path / "xdg" / "trtpipe" / "artifacts")
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/ignored")  # the XDG spec: only absolute paths count
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert compose().cache.dir == str(tmp_path / "home" / ".cache" / "trtpipe" / "artifacts")
    monkeypatch.setenv("TRTPIPE_CACHE", str(tmp_path))
    assert compose().cache.dir == str(tmp_path)
    assert compose(f"cache.dir={tmp_path / 'explicit'}").cache.dir == str(tmp_path / "explicit")


@pytest.mark.parametrize(
    "override, expected",
    [
        ("sanitize.no_such_key=1", "config key 'sanitize.no_such_key' is not a trtpipe setting"),
        ("+sanitize.no_such_key=1", "config key 'sanitize.no_such_key' is not a trtpipe setting"),
        ("+no_such_stage.x=1", "config key 'no_such_stage' is not a trtpipe setting"),
        ("upgrade_opset.target=seventeen", "upgrade_opset.target"),
        ("sanitize.fold_constans=false", "did you mean 'fold_constants'"),
        ("+recipe=does_not_exist", "there is no recipe 'does_not_exist'"),
        ("stages=[sanitize,no_such_stage]", "'stages' lists 'no_such_stage'"),
        ("stages=[upgrade_opset,upgrade_opset]", "lists a stage twice"),
    ],
)
def test_bad_config_is_one_line_user_error_with_the_key(override, expected):
    with pytest.raises(UserError) as caught:
        compose(override)
    message = str(caught.value)
    assert expected in message
    assert "\n" not in message
    assert "Fix:" in message


def test_missing_recipe_lists_the_available_ones():
    with pytest.raises(UserError, match="transformer_fp16"):
        compose("+recipe=nope")


def test_preflight_checks_every_value_of_a_sweep():
    preflight(conf_dir(), ["-m", "upgrade_opset.target=17,18"])
    with pytest.raises(UserError, match="upgrade_opset.target"):
        preflight(conf_dir(), ["-m", "upgrade_opset.target=17,x"])


def test_preflight_leaves_info_flags_to_hydra():
    preflight(conf_dir(), ["--cfg", "job", "sanitize.no_such_key=1"])  # Hydra reports it itself


def test_user_recipe_directory_with_inheritance(monkeypatch, tmp_path):
    (tmp_path / "team_bert.yaml").write_text(
        "# @package _global_\n"
        "# Our BERT: the transformer recipe with opset 18.\n"
        "defaults:\n  - transformer_fp16\n  - _self_\n"
        "upgrade_opset:\n  target: 18\n"
    )
    monkeypatch.setenv("TRTPIPE_RECIPES", str(tmp_path))
    register_configs()
    cfg = compose("+recipe=team_bert")
    assert cfg.upgrade_opset.target == 18
    assert cfg.model.builtin == "transformer"


def test_recipe_without_global_header_is_rejected(monkeypatch, tmp_path):
    """Only when asked for (issue 32, item 9): other runs skip the file with a warning."""
    (tmp_path / "bad.yaml").write_text("model:\n  builtin: nafnet\n")
    monkeypatch.setenv("TRTPIPE_RECIPES", str(tmp_path))
    register_configs()
    assert compose("+recipe=fp32").precision.default == "fp32"
    with pytest.raises(UserError, match="@package _global_"):
        compose("+recipe=bad")


def test_user_recipe_env_pointing_nowhere_is_a_user_error(monkeypatch, tmp_path):
    monkeypatch.setenv("TRTPIPE_RECIPES", str(tmp_path / "missing"))
    with pytest.raises(UserError, match="not a directory"):
        register_configs()
