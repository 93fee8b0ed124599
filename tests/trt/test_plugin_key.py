"""A plugin library is part of the build's key by content, not only by path.

A plugin rebuilt at the same path makes another engine; the cache must not hand back
the engine built with the old one. Runs without TensorRT (the build is deferred, and
the deferred entry is cached under the same key an engine would be).
"""

from __future__ import annotations

from trtpipe import api


def build_record(tmp_path, plugin):
    result = api.run(["stages=[precision,build]", f"+build.plugins=[{plugin}]", f"cache.dir={tmp_path / 'cache'}"],
                     run_dir=tmp_path / f"run-{len(list(tmp_path.glob('run-*')))}", start_dir=tmp_path)
    return next(s for s in result.manifest["stages"] if s["name"] == "build")


def test_a_rebuilt_plugin_at_the_same_path_changes_the_build_key(tmp_path):
    plugin = tmp_path / "libmyplugin.so"
    plugin.write_bytes(b"plugin build 1")
    first = build_record(tmp_path, plugin)
    assert first["status"] == "deferred"
    assert set(first["material"]["files"]) == {str(plugin)}
    assert build_record(tmp_path, plugin)["key"] == first["key"], "same file: cached"

    plugin.write_bytes(b"plugin build 2")
    rebuilt = build_record(tmp_path, plugin)
    assert rebuilt["key"] != first["key"]
    assert rebuilt["material"]["files"][str(plugin)] != first["material"]["files"][str(plugin)]


def test_a_plugin_missing_here_is_keyed_as_missing(tmp_path):
    record = build_record(tmp_path, tmp_path / "on_the_gpu_machine.so")
    assert record["material"]["files"] == {str(tmp_path / "on_the_gpu_machine.so"): None}
