"""A stage output that is a byte copy of an input's cache-entry file takes its recorded digest.

upgrade_opset leaves the weights alone, so with external data its `model.onnx.data` is
sanitize's entry file, hard-linked (`onnx_io.data_file_source`, `save_model(link_data_under=)`),
and the runner does not hash it again (on a 2.7 GB model: 1.3 s of copy and 1.6 s of hash
saved). The recorded digest must still be the true one, and the run directory gets a copy
that onnx can load.
"""

from __future__ import annotations

from pathlib import Path

import onnx

from tests.graph import graphs
from trtpipe import api
from trtpipe.onnxmodel import onnx_io
from trtpipe.onnxmodel.onnx_io import data_file_source, load_model, save_model
from trtpipe.models import BUILTIN_INPUT_SPECS, BUILTIN_MODELS
from trtpipe.cache import cache as cache_module
from trtpipe.cache.hashing import sha256_file


def test_upgrade_copies_sanitize_data_file_and_reuses_its_digest(tmp_path, monkeypatch):
    source = tmp_path / "src" / "transformer.onnx"
    save_model(BUILTIN_MODELS["transformer"](), source, external_threshold_bytes=0)
    monkeypatch.setattr(onnx_io, "EXTERNAL_DATA_THRESHOLD_BYTES", 1000)
    hashed: list[Path] = []
    monkeypatch.setattr(cache_module, "sha256_file", lambda path: hashed.append(Path(path)) or sha256_file(path))
    data = [f"+data.inputs.{name}={{low:{spec['low']},high:{spec['high']},dtype:{spec['dtype']}}}"
            for name, spec in BUILTIN_INPUT_SPECS["transformer"].items()]
    result = api.run(["stages=[sanitize,upgrade_opset]", f"model.path={source}", f"cache.dir={tmp_path / 'cache'}",
                      *data], run_dir=tmp_path / "run", start_dir=tmp_path)

    sanitized, upgraded = (result.stages[0].outputs["model"], result.stages[1].outputs["model"])
    entries = tmp_path / "cache" / "entries"
    in_cache = {p.parent.parent.name: p for p in entries.glob("*/*/model.onnx.data")}
    assert in_cache["upgrade_opset"].stat().st_ino == in_cache["sanitize"].stat().st_ino, "hard-linked in the cache"
    assert upgraded.with_name("model.onnx.data").stat().st_nlink == 1, "the run directory's copy loads with onnx"
    onnx.load(str(upgraded))  # onnx refuses a data file with two links
    upgraded_data = upgraded.with_name("model.onnx.data")
    assert upgraded_data.read_bytes() == sanitized.with_name("model.onnx.data").read_bytes()
    entry = [p for p in hashed if p.name == "model.onnx.data"]
    assert len(entry) == 1, f"only sanitize's data file is hashed, not upgrade's copy: {entry}"
    manifest_digest = result.manifest["stages"][1]["outputs"]["model"]["sha256"]
    from trtpipe.cache.hashing import artifact_digest
    assert artifact_digest(upgraded) == manifest_digest, "the reused digest is the true one"


def test_data_file_source_refuses_a_file_with_other_bytes_between_tensors(tmp_path):
    path = tmp_path / "m.onnx"
    save_model(graphs.layernorm_graph(shape=(2, 3, 512)), path, external_threshold_bytes=0)  # 2 KiB weights
    model = load_model(path, weights_on_disk=True)
    assert data_file_source(model) == path.with_name("m.onnx.data").resolve()
    spans = [onnx_io.on_disk_span(t) for t in model.graph.initializer if onnx_io.is_weight(t)]
    padded = next((offset, length) for _, offset, length in spans if length % onnx_io.EXTERNAL_ALIGNMENT_BYTES)
    with open(path.with_name("m.onnx.data"), "r+b") as data:  # one byte of padding after a tensor
        data.seek(sum(padded))
        data.write(b"\1")
    assert data_file_source(model) is None


def test_a_user_data_file_is_never_hard_linked(tmp_path, monkeypatch):
    """Same layout as trtpipe's own (data_file_source finds it), but outside the cache: copied."""
    source = tmp_path / "src" / "transformer.onnx"
    save_model(BUILTIN_MODELS["transformer"](), source, external_threshold_bytes=0)
    monkeypatch.setattr(onnx_io, "EXTERNAL_DATA_THRESHOLD_BYTES", 1000)
    api.run(["stages=[upgrade_opset]", f"model.path={source}", f"cache.dir={tmp_path / 'cache'}"],
            run_dir=tmp_path / "run", start_dir=tmp_path)
    assert source.with_name("transformer.onnx.data").stat().st_nlink == 1
    onnx.load(str(source))  # the user's model still loads with onnx
