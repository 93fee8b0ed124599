"""Issue 33 item 6: the memos that make a fully cached run cheap (trtpipe/memo/) see every change.

The composed-config memo's key must change with each thing the composition reads (a config or
recipe file's text, the overrides, an environment variable the config names, the start directory,
the versions, trtpipe's config code, an installed Hydra plugin); an entry is read only where it is
safe (the user's own private file, the key inside it, the environment Hydra copied unchanged). The
model-inputs memo gives with_model_ranges' answer exactly, keyed on the model's digest, the data
block, the sequence length and the code that computes it. End-to-end: test_front_door_cached.py.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import hydra
import omegaconf
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import trtpipe
from trtpipe.cache.cache_dir import claim_cache_dir
from trtpipe.cache.hashing import sha256_file
from trtpipe.config.locate import conf_dir
from trtpipe.data import model_ranges, with_model_ranges
from trtpipe.memo import compose, model_inputs

PACKAGE = Path(trtpipe.__file__).resolve().parent


@pytest.fixture
def conf_copy(tmp_path):
    copy = tmp_path / "conf"
    shutil.copytree(conf_dir(), copy)
    return copy


def test_the_composition_key_changes_with_every_file_override_and_environment_it_reads(conf_copy, tmp_path,
                                                                                        monkeypatch):
    monkeypatch.chdir(tmp_path)
    recipes = tmp_path / "recipes"
    recipes.mkdir()
    (recipes / "team.yaml").write_text("# @package _global_\nprecision:\n  default: fp32\n")
    monkeypatch.setenv("TRTPIPE_RECIPES", str(recipes))
    monkeypatch.setenv("MODEL_FILE", "a.onnx")
    overrides = ["+recipe=team", "model.path=${oc.env:MODEL_FILE}"]
    base = compose.memo_key(conf_copy, overrides)
    assert compose.memo_key(conf_copy, overrides) == base  # the same inputs: the same key

    changed = {}
    (conf_copy / "validate" / "default.yaml").write_text((conf_copy / "validate" / "default.yaml").read_text() + "\n#")
    changed["a conf file's text"] = compose.memo_key(conf_copy, overrides)
    (conf_copy / "precision" / "extra.yaml").write_text("default: fp32\n")
    changed["a new conf file"] = compose.memo_key(conf_copy, overrides)
    (recipes / "team.yaml").write_text("# @package _global_\nprecision:\n  default: fp16\n")
    changed["a recipe's text"] = compose.memo_key(conf_copy, overrides)
    (recipes / "other.yaml").write_text("# @package _global_\n")
    changed["a new recipe"] = compose.memo_key(conf_copy, overrides)
    changed["the overrides"] = compose.memo_key(conf_copy, [*overrides, "data.seed=1"])
    changed["their order"] = compose.memo_key(conf_copy, overrides[::-1])
    monkeypatch.setenv("MODEL_FILE", "b.onnx")
    changed["a variable oc.env names"] = compose.memo_key(conf_copy, overrides)
    other = tmp_path / "other_recipes"
    shutil.copytree(recipes, other)
    monkeypatch.setenv("TRTPIPE_RECIPES", str(other))
    changed["TRTPIPE_RECIPES"] = compose.memo_key(conf_copy, overrides)
    monkeypatch.chdir(other)
    changed["the start directory"] = compose.memo_key(conf_copy, overrides)
    for module, name in ((trtpipe, "trtpipe"), (hydra, "hydra"), (omegaconf, "omegaconf")):
        monkeypatch.setattr(module, "__version__", module.__version__ + ".post1")
        changed[f"the {name} version"] = compose.memo_key(conf_copy, overrides)
    keys = [base, *changed.values()]
    assert len(set(keys)) == len(keys), [name for name, key in changed.items() if keys.count(key) > 1]


def test_the_composition_key_changes_with_trtpipes_config_code_and_hydras_plugins(conf_copy, tmp_path,
                                                                                   monkeypatch):
    """An edited schema in a checkout keeps the version number; a plugin registers configs."""
    package = tmp_path / "trtpipe"
    shutil.copytree(PACKAGE / "config", package / "config")
    shutil.copytree(PACKAGE / "memo", package / "memo")
    shutil.copy(PACKAGE / "single_run.py", package / "single_run.py")
    monkeypatch.setattr(compose, "_PACKAGE", package)
    base = compose.memo_key(conf_copy, [])
    schema = package / "config" / "schema.py"
    schema.write_text(schema.read_text().replace("lock_timeout: float = 7200.0", "lock_timeout: float = 60.0"))
    edited = compose.memo_key(conf_copy, [])
    plugins = tmp_path / "site" / "hydra_plugins" / "my_launcher"
    plugins.mkdir(parents=True)
    (plugins / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    with_plugin = compose.memo_key(conf_copy, [])
    (plugins / "__init__.py").write_text("# changed\n")
    plugin_edited = compose.memo_key(conf_copy, [])
    assert len({base, edited, with_plugin, plugin_edited}) == 4


def _composed(overrides: list[str]):
    from hydra import compose as hydra_compose, initialize_config_dir

    from trtpipe.config.store import register_configs

    register_configs()
    with initialize_config_dir(config_dir=str(conf_dir()), version_base="1.3", job_name="trtpipe"):
        return hydra_compose(config_name="config", overrides=overrides, return_hydra_config=True)


@pytest.fixture
def memo_cache(tmp_path, monkeypatch):
    root = tmp_path / "cache"
    root.mkdir()
    claim_cache_dir(root)
    (root / "index").mkdir(exist_ok=True)
    monkeypatch.setenv("TRTPIPE_CACHE", str(root))
    return root


def test_an_entry_is_read_only_from_the_users_private_file_under_its_own_key(memo_cache):
    cfg = _composed(["data.seed=3"])
    compose.save("k1", cfg, conf_dir())
    folder = memo_cache / "index" / f"compose-{os.getuid()}"
    entry = folder / "k1.pickle"
    assert oct(folder.stat().st_mode & 0o777) == "0o700" and oct(entry.stat().st_mode & 0o777) == "0o600"
    loaded = compose.load("k1")
    assert omegaconf.OmegaConf.to_yaml(loaded) == omegaconf.OmegaConf.to_yaml(cfg)
    assert omegaconf.OmegaConf.get_type(loaded.precision) is omegaconf.OmegaConf.get_type(cfg.precision)
    assert compose.load("k2") is None
    shutil.copy(entry, folder / "k2.pickle")  # a file under another key's name
    os.chmod(folder / "k2.pickle", 0o600)
    assert compose.load("k2") is None
    os.chmod(entry, 0o620)  # writable by the group: another user could have written it
    assert compose.load("k1") is None
    os.chmod(entry, 0o600)
    if os.getuid() == 0:  # a file another user owns is never unpickled
        os.chown(entry, 12345, -1)
        assert compose.load("k1") is None
        os.chown(entry, 0, -1)
    os.chmod(folder, 0o770)
    assert compose.load("k1") is None
    os.chmod(folder, 0o700)
    assert compose.load("k1") is not None


def test_an_entry_is_stale_when_a_variable_hydra_copied_changed(memo_cache, monkeypatch):
    monkeypatch.setenv("TRTPIPE_FRONT_DOOR_TEST", "one")
    cfg = _composed(["hydra.job.env_copy=[TRTPIPE_FRONT_DOOR_TEST]"])
    compose.save("k", cfg, conf_dir())
    assert compose.load("k") is not None
    monkeypatch.setenv("TRTPIPE_FRONT_DOOR_TEST", "two")
    assert compose.load("k") is None


def test_nothing_is_remembered_from_a_source_the_key_does_not_hold_or_outside_a_cache(memo_cache, tmp_path,
                                                                                      monkeypatch):
    extra = tmp_path / "extra_conf"
    extra.mkdir()
    cfg = _composed([f"hydra.searchpath=[file://{extra}]"])
    compose.save("searchpath", cfg, conf_dir())
    assert compose.load("searchpath") is None
    compose.save("other_conf", _composed([]), tmp_path / "not_the_conf_dir")
    assert compose.load("other_conf") is None
    monkeypatch.setenv("TRTPIPE_CACHE", str(tmp_path / "no_cache_yet"))
    compose.save("no_cache", _composed([]), conf_dir())
    assert not (tmp_path / "no_cache_yet").exists()


def test_at_most_the_newest_entries_are_kept(memo_cache, monkeypatch):
    monkeypatch.setattr(compose, "_KEEP", 3)
    cfg = _composed([])
    for number in range(5):
        compose.save(f"k{number}", cfg, conf_dir())
        os.utime(memo_cache / "index" / f"compose-{os.getuid()}" / f"k{number}.pickle", (number, number))
    compose.save("k5", cfg, conf_dir())
    kept = sorted(p.stem for p in (memo_cache / "index" / f"compose-{os.getuid()}").glob("*.pickle"))
    assert kept == ["k3", "k4", "k5"]


def _token_model(path: Path) -> Path:
    """input_ids [1, seq] -> Gather into a 50-row table -> ReduceMean: a range and a dynamic dim to read."""
    import numpy as np

    table = numpy_helper.from_array(np.arange(400, dtype=np.float32).reshape(50, 8), "table")
    graph = helper.make_graph(
        [helper.make_node("Gather", ["table", "input_ids"], ["embedded"]),
         helper.make_node("ReduceMean", ["embedded"], ["pooled"], keepdims=0)],
        "tokens", [helper.make_tensor_value_info("input_ids", TensorProto.INT64, [1, "seq"])],
        [helper.make_tensor_value_info("pooled", TensorProto.FLOAT, None)], [table])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def test_the_model_inputs_memo_gives_with_model_ranges_answer_without_reading_the_model(tmp_path, monkeypatch):
    model = _token_model(tmp_path / "tokens.onnx")
    index = tmp_path / "index"
    index.mkdir()
    data = {"seed": 0, "iterations": 2, "inputs": {}, "path": None, "sha256": None}
    expected_data, expected_read, expected_shaped = with_model_ranges(dict(data), model, 32)
    assert expected_read and expected_shaped  # the model states a range and sizes a dynamic dim
    digest = sha256_file(model)
    first = model_ranges(dict(data), model, digest, index, 32)
    monkeypatch.setattr("trtpipe.data._load_unchecked", lambda path: pytest.fail("the memo read the model"))
    for completed, read, shaped in (first, model_ranges(dict(data), model, digest, index, 32)):
        assert completed == expected_data and shaped == expected_shaped
        assert {name: (r.low, r.high, r.reason) for name, r in read.items()} == \
            {name: (r.low, r.high, r.reason) for name, r in expected_read.items()}
    keys = {model_inputs.memo_key(digest, data, 32), model_inputs.memo_key("0" * 64, data, 32),
            model_inputs.memo_key(digest, {**data, "seed": 1}, 32), model_inputs.memo_key(digest, data, 64)}
    assert len(keys) == 4 and None not in keys
    monkeypatch.setattr(model_inputs, "_PACKAGE", tmp_path / "pkg")
    for name in model_inputs.CODE:  # an edited module of the computation is another key
        (tmp_path / "pkg" / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(PACKAGE / name, tmp_path / "pkg" / name)
    assert model_inputs.memo_key(digest, data, 32) in keys
    (tmp_path / "pkg" / "sample_dims.py").write_text((PACKAGE / "sample_dims.py").read_text() + "\n#")
    assert model_inputs.memo_key(digest, data, 32) not in keys
