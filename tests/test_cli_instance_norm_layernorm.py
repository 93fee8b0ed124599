"""tf2onnx's InstanceNormalization LayerNorm through the command line (issue 30 item 6): sanitize ->
upgrade_opset fuses it, and the stage line counts it. A dynamic sequence length at tf2onnx's usual opset 13
(the ones and zeros computed from Shape(x) at run time) and a static one (sanitize folds them into
initializers). Before the rule the line said `0 LayerNorm fused` and the InstanceNormalization stayed."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

from tests.cli_helpers import run_trtpipe
from tests.graph import graphs
from tests.graph.instance_norm_layernorm import CHANNELS, instance_norm_layernorm


@pytest.mark.parametrize(("name", "seq", "opset"), [("dynamic", "seq", 13), ("static", 6, 17)])
def test_upgrade_opset_fuses_and_counts_the_instance_norm_layernorm(tmp_path, name, seq, opset):
    model = instance_norm_layernorm(seq=seq, opset=opset)
    onnx.save(model, str(tmp_path / f"{name}.onnx"))
    run = run_trtpipe(tmp_path, f"model.path={tmp_path / name}.onnx", "stages=[sanitize,upgrade_opset]",
                      run_name=name)
    assert run.code == 0, run.stdout + run.stderr
    (line,) = [text for text in run.stdout.splitlines() if text.strip().startswith("upgrade_opset") and " ran " in text]
    assert f"opset {opset} -> 17, 1 LayerNorm fused, 0 refused" in line, line
    stage = next(s for s in run.manifest["stages"] if s["name"] == "upgrade_opset")
    upgraded = onnx.load(str(run.run_dir / stage["outputs"]["model"]["path"]))
    assert [n.op_type for n in upgraded.graph.node] == ["LayerNormalization", "MatMul"]
    x = graphs.random_input((2, 6, CHANNELS))
    np.testing.assert_allclose(graphs.run(upgraded, {"x": x})[0], graphs.run(model, {"x": x})[0],
                               rtol=1e-5, atol=1e-5)
