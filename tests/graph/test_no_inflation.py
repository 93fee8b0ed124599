"""Sanitize never inflates a model (issue 24 item 5): constant folding's growth rule (trtpipe/graph/fold/growth.py).

The bound stated in the README, checked here on every model: with limit L and
floor F (sanitize.fold_growth_limit, sanitize.fold_growth_floor_bytes), the
sanitized file is at most L x (the source's bytes + F per folded node). Models:
a graph whose constants expand by Expand, Tile, ConstantOfShape, broadcasting
Add and a chain of Tiles to about 50 MB (ONNX Runtime's outputs unchanged),
onnx's own `light_*` test models (every weight a ConstantOfShape: 102 MB from
light_resnet50's 80 KB before), and seeded random graphs of expansions.
Both folding paths (fast_fold.py and onnx-graphsurgeon's) must write the same bytes.
"""

from __future__ import annotations

import glob
import os
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.graph import graphs
from trtpipe.config.schema import SanitizeConfig
from trtpipe.graph.fold import fast_fold
from trtpipe.graph.sanitize import sanitize_model
from trtpipe.stages.sanitize import SanitizeModel

LIMIT, FLOOR = SanitizeConfig.fold_growth_limit, SanitizeConfig.fold_growth_floor_bytes


def _init(name, array):
    return numpy_helper.from_array(np.asarray(array), name)


def _expanding_model() -> onnx.ModelProto:
    """y = (x + mean rows of x + each of five expanded constants) @ W^T: 53 MB if folded, 200 KB as given."""
    rng = np.random.default_rng(0)
    f32 = np.float32
    nodes = [
        helper.make_node("ConstantOfShape", ["cos_shape"], ["cos"], name="fill",
                         value=_init("v", np.array([0.25], f32))),  # 24 MiB
        helper.make_node("Expand", ["row", "expand_shape"], ["expanded"], name="expand"),  # 12 MiB
        helper.make_node("Tile", ["block", "tile_repeats"], ["tiled"], name="tile"),  # 12 MiB
        helper.make_node("Add", ["column", "row2"], ["broadcast"], name="broadcast_add"),  # 4 MiB
        # A chain, each step within the limit: 64 KiB -> 128 KiB -> 256 KiB -> 512 KiB -> 1 MiB.
        helper.make_node("Tile", ["seed", "twice"], ["chain1"], name="chain1"),
        helper.make_node("Tile", ["chain1", "twice"], ["chain2"], name="chain2"),
        helper.make_node("Tile", ["chain2", "twice"], ["chain3"], name="chain3"),
        helper.make_node("Tile", ["chain3", "twice"], ["chain4"], name="chain4"),
        helper.make_node("Transpose", ["w"], ["w_t"], name="transpose_w", perm=[1, 0]),  # folds: same size
    ]
    summed = "x"
    for index, name in enumerate(["cos", "expanded", "tiled", "broadcast", "chain4"]):
        # Read with the input: what folding computes for these is written into the model.
        nodes.append(helper.make_node("Add", ["x", name], [f"{name}_x"]))
        nodes.append(helper.make_node("ReduceMean", [f"{name}_x"], [f"{name}_mean"], axes=[0], keepdims=1))
        nodes.append(helper.make_node("Add", [summed, f"{name}_mean"], [f"sum{index}"]))
        summed = f"sum{index}"
    nodes.append(helper.make_node("MatMul", [summed, "w_t"], ["y"], name="matmul"))
    initializers = [
        _init("cos_shape", np.array([24576, 256], np.int64)),
        _init("row", rng.standard_normal((1, 256)).astype(f32)),
        _init("expand_shape", np.array([12288, 256], np.int64)),
        _init("block", rng.standard_normal((16, 256)).astype(f32)),
        _init("tile_repeats", np.array([768, 1], np.int64)),
        _init("column", rng.standard_normal((4096, 1)).astype(f32)),
        _init("row2", rng.standard_normal((1, 256)).astype(f32)),
        _init("seed", rng.standard_normal((64, 256)).astype(f32)),
        _init("twice", np.array([2, 1], np.int64)),
        _init("w", rng.standard_normal((256, 256)).astype(f32)),
    ]
    return graphs.make_model(nodes, [graphs.float_input("x", [1, 256])], [graphs.float_input("y", [1, 256])],
                             initializers)


def _sanitized(src: Path, dst: Path, *, fast: bool, **options) -> dict:
    previous, fast_fold.ENABLED = fast_fold.ENABLED, fast
    try:
        return sanitize_model(src, dst, **options)
    finally:
        fast_fold.ENABLED = previous


def _check_bound_and_paths(src: Path, tmp_path: Path) -> tuple[Path, dict]:
    """Sanitize `src` both ways: same bytes, within the stated bound; the fast path's result and report."""
    fast, slow = tmp_path / "fast.onnx", tmp_path / "slow.onnx"
    report = _sanitized(src, fast, fast=True)
    assert _sanitized(src, slow, fast=False)["left_unfolded"] == report["left_unfolded"]
    assert fast.read_bytes() == slow.read_bytes()
    before, after = src.stat().st_size, fast.stat().st_size
    assert after <= LIMIT * (before + FLOOR * max(report["nodes_folded"], 0)), (before, after, report["nodes_folded"])
    return fast, report


def test_expanding_constants_stay_unfolded_and_the_model_computes_the_same(tmp_path):
    src = tmp_path / "src.onnx"
    onnx.save(_expanding_model(), str(src))
    dst, report = _check_bound_and_paths(src, tmp_path)
    assert dst.stat().st_size < 1 << 20  # 52 MB before the growth rule
    left = {entry["node"]: entry for entry in report["left_unfolded"]}
    assert set(left) == {"fill", "expand", "tile", "broadcast_add", "chain2"}  # chain2: 4x its source
    assert left["fill"]["output_bytes"] == 24576 * 256 * 4 and left["fill"]["op_type"] == "ConstantOfShape"
    assert left["broadcast_add"]["output_bytes"] == 4096 * 256 * 4
    assert left["broadcast_add"]["input_bytes"] == (4096 + 256) * 4
    assert left["chain2"]["input_bytes"] == 64 * 256 * 4 + 16  # its sources (seed, twice), not its input
    ops = [node.op_type for node in onnx.load(str(dst)).graph.node]
    assert "Transpose" not in ops and ops.count("Tile") == 4  # a same-size fold still happens; chain1 folded
    x = graphs.random_input([1, 256])
    want = graphs.run(onnx.load(str(src)), {"x": x})[0]
    np.testing.assert_allclose(graphs.run(onnx.load(str(dst)), {"x": x})[0], want, rtol=1e-5, atol=1e-4)  # fp32 summation order only


def test_no_limit_folds_everything_as_before(tmp_path):
    src = tmp_path / "src.onnx"
    onnx.save(_expanding_model(), str(src))
    report = sanitize_model(src, tmp_path / "out.onnx", fold_growth_limit=None)
    assert report["left_unfolded"] == [] and (tmp_path / "out.onnx").stat().st_size > 50 << 20


def test_the_stage_line_says_what_was_left_unfolded(tmp_path):
    src = tmp_path / "src.onnx"
    onnx.save(_expanding_model(), str(src))
    config = {key: getattr(SanitizeConfig, key) for key in SanitizeConfig.__dataclass_fields__}
    outcome = SanitizeModel().run({"model": src}, config, tmp_path)
    assert "5 left unfolded by the growth rule" in outcome.summary
    assert "broadcast_add Add 4.0 MiB" in outcome.summary
    assert outcome.details["left_unfolded"]


LIGHT = sorted(glob.glob(os.path.join(os.path.dirname(onnx.__file__), "backend/test/data/light/light_*.onnx")))


@pytest.mark.parametrize("path", LIGHT, ids=[os.path.basename(p)[:-5] for p in LIGHT])
def test_onnx_light_models_stay_within_the_bound(tmp_path, path):
    """Every weight of these models is a ConstantOfShape: light_resnet50 folded into 102 MB before."""
    dst, report = _check_bound_and_paths(Path(path), tmp_path)
    assert report["left_unfolded"]
    if sum(entry["output_bytes"] or 0 for entry in report["left_unfolded"]) > 128 << 20:
        return  # ONNX Runtime would compute that much per run, twice: the numerics are checked on the others
    source = onnx.load(path)
    weights = {tensor.name for tensor in source.graph.initializer}
    value = next(value for value in source.graph.input if value.name not in weights)
    x = graphs.random_input([dim.dim_value or 1 for dim in value.type.tensor_type.shape.dim])
    want = graphs.run(source, {value.name: x})[0]
    np.testing.assert_allclose(graphs.run(onnx.load(str(dst)), {value.name: x})[0], want, rtol=1e-4, atol=1e-5)


def _random_expansions(seed: int) -> onnx.ModelProto:
    """Constants expanded by random Tile/Expand/Concat/broadcast Add/Mul/Cast/Transpose chains, reusing tensors."""
    rng = np.random.default_rng(seed)
    initializers, nodes, pool = [], [], []
    for index in range(3):
        shape = [int(rng.integers(1, 48)), int(rng.integers(1, 48))]
        initializers.append(_init(f"c{index}", rng.standard_normal(shape).astype(np.float32)))
        pool.append((f"c{index}", shape))
    for step in range(int(rng.integers(4, 12))):
        (a, sa), (b, sb) = (pool[int(i)] for i in rng.integers(0, len(pool), 2))
        out, kind = f"t{step}", rng.choice(["tile", "expand", "concat", "add", "mul", "cast", "transpose"])
        if kind == "tile":
            reps = [int(rng.integers(1, 9)), int(rng.integers(1, 5))]
            initializers.append(_init(f"r{step}", np.array(reps, np.int64)))
            nodes.append(helper.make_node("Tile", [a, f"r{step}"], [out]))
            shape = [sa[0] * reps[0], sa[1] * reps[1]]
        elif kind == "expand":
            shape = [sa[0] * int(rng.integers(1, 64)), sa[1]]
            nodes.append(helper.make_node("Reshape", [a, f"flat{step}"], [f"f{step}"]))
            initializers.append(_init(f"flat{step}", np.array([1, sa[0] * sa[1]], np.int64)))
            shape = [shape[0], sa[0] * sa[1]]
            initializers.append(_init(f"e{step}", np.array(shape, np.int64)))
            nodes.append(helper.make_node("Expand", [f"f{step}", f"e{step}"], [out]))
        elif kind == "concat" and sa[1] == sb[1]:
            nodes.append(helper.make_node("Concat", [a, b], [out], axis=0))
            shape = [sa[0] + sb[0], sa[1]]
        elif kind == "add":
            nodes.append(helper.make_node("ReduceMean", [a], [f"m{step}"], axes=[1], keepdims=1))
            nodes.append(helper.make_node("ReduceMean", [b], [f"n{step}"], axes=[0], keepdims=1))
            nodes.append(helper.make_node("Add", [f"m{step}", f"n{step}"], [out]))
            shape = [sa[0], sb[1]]
        elif kind == "mul":
            nodes.append(helper.make_node("Mul", [a, a], [out]))
            shape = sa
        elif kind == "cast":
            nodes.append(helper.make_node("Cast", [a], [f"d{step}"], to=TensorProto.DOUBLE))
            nodes.append(helper.make_node("Cast", [f"d{step}"], [out], to=TensorProto.FLOAT))
            shape = sa
        else:
            nodes.append(helper.make_node("Transpose", [a], [out], perm=[1, 0]))
            shape = [sa[1], sa[0]]
        if any(node.output[0] == out for node in nodes):
            pool.append((out, shape))
    total = "x"
    for index, (name, _) in enumerate(pool):
        # Each read with the input, so that what folding computes for them is written into the model.
        nodes.append(helper.make_node("Add", ["x", name], [f"a{index}"]))
        nodes.append(helper.make_node("ReduceSum", [f"a{index}"], [f"s{index}"], keepdims=1))
        nodes.append(helper.make_node("Add", [total, f"s{index}"], [f"y{index}"]))
        total = f"y{index}"
    nodes.append(helper.make_node("Identity", [total], ["y"]))
    return graphs.make_model(nodes, [graphs.float_input("x", [1, 1])], [graphs.float_input("y", [1, 1])],
                             initializers)


@pytest.mark.parametrize("seed", range(12))
def test_random_expansions_stay_within_the_bound_and_compute_the_same(tmp_path, seed):
    src = tmp_path / "src.onnx"
    onnx.save(_random_expansions(seed), str(src))
    dst, _ = _check_bound_and_paths(src, tmp_path)
    x = graphs.random_input([1, 1], seed)
    want = graphs.run(onnx.load(str(src)), {"x": x})[0]
    np.testing.assert_allclose(graphs.run(onnx.load(str(dst)), {"x": x})[0], want, rtol=1e-4, atol=1e-3)


def test_the_fast_pass_applies_the_rule_itself():
    """The byte comparisons above mean something only if the fast pass ran (not Polygraphy's in its place)."""
    from trtpipe.graph.fold.fast_fold import fold_pass
    from trtpipe.graph.fold.growth import GrowthRule, Unfolded
    from trtpipe.onnxmodel import value_info

    unfolded = Unfolded()
    model = value_info.infer_shapes(_expanding_model())
    folded = fold_pass(model, infer_shapes=True, size_threshold=64 << 20, growth=GrowthRule(), unfolded=unfolded)
    assert folded is not None
    assert {entry["node"] for entry in unfolded.remaining(folded)} == {"fill", "expand", "tile", "broadcast_add",
                                                                       "chain2"}


def test_a_limit_below_one_is_refused_with_a_fix(tmp_path):
    from trtpipe.errors import UserError

    onnx.save(_expanding_model(), str(tmp_path / "src.onnx"))
    with pytest.raises(UserError, match="fold_growth_limit"):
        sanitize_model(tmp_path / "src.onnx", tmp_path / "out.onnx", fold_growth_limit=0.5)
    assert not (tmp_path / "out.onnx").exists()


def _unsized_model() -> onnx.ModelProto:
    """A shape computation (Unsqueeze, Concat) and a Tile of a 64 KiB constant, both read with the input."""
    rng = np.random.default_rng(3)
    nodes = [helper.make_node("Unsqueeze", ["rows", "axes"], ["rows_1d"], name="unsqueeze"),
             helper.make_node("Concat", ["rows_1d", "minus_one"], ["target"], name="concat", axis=0),
             helper.make_node("Reshape", ["x", "target"], ["x2"], name="reshape"),
             helper.make_node("Tile", ["block", "repeats"], ["tiled"], name="tile"),
             helper.make_node("Add", ["x2", "tiled"], ["summed"]),
             helper.make_node("ReduceMean", ["summed"], ["y"], axes=[0], keepdims=1)]
    initializers = [_init("rows", np.array(1, np.int64)), _init("axes", np.array([0], np.int64)),
                    _init("minus_one", np.array([-1], np.int64)),
                    _init("block", rng.standard_normal((64, 256)).astype(np.float32)),
                    _init("repeats", np.array([64, 1], np.int64))]
    return graphs.make_model(nodes, [graphs.float_input("x", [256])], [graphs.float_input("y", [1, 256])],
                             initializers)


def test_without_shapes_a_shape_computation_still_folds_and_an_expansion_does_not(tmp_path):
    """infer_shapes=false: no output has a size; the last pass folds what derives from at most the floor."""
    src = tmp_path / "src.onnx"
    onnx.save(_unsized_model(), str(src))
    outputs = []
    for fast in (True, False):
        report = _sanitized(src, tmp_path / f"out-{fast}.onnx", fast=fast, infer_shapes=False)
        outputs.append((tmp_path / f"out-{fast}.onnx").read_bytes())
    assert outputs[0] == outputs[1]
    assert [entry["node"] for entry in report["left_unfolded"]] == ["tile"]
    assert report["left_unfolded"][0]["output_bytes"] is None  # unknown: inference was off
    dst = tmp_path / "out-True.onnx"
    ops = [node.op_type for node in onnx.load(str(dst)).graph.node]
    assert "Concat" not in ops and "Unsqueeze" not in ops and "Tile" in ops
    assert dst.stat().st_size <= LIMIT * (src.stat().st_size + FLOOR * report["nodes_folded"])
    x = graphs.random_input([256])
    np.testing.assert_allclose(graphs.run(onnx.load(str(dst)), {"x": x})[0],
                               graphs.run(onnx.load(str(src)), {"x": x})[0], rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("partitioning", [None, "recursive"])
def test_the_loop_without_a_rule_writes_polygraphys_bytes(partitioning):
    """gs_fold.py replaces Polygraphy's loader only to hand onnx-graphsurgeon the rule: without one, same bytes."""
    from polygraphy.backend.onnx import fold_constants as polygraphy_fold_constants

    from trtpipe.graph.fold.gs_fold import fold_constants
    from trtpipe.models import builtin_model
    from trtpipe.onnxmodel import value_info

    for model in (_expanding_model(), _unsized_model(), builtin_model("transformer")):
        prepared = value_info.infer_shapes(model)
        ours, theirs = (onnx.ModelProto.FromString(prepared.SerializeToString()) for _ in range(2))
        ours = fold_constants(ours, partitioning=partitioning, infer_shapes=True, size_threshold=64 << 20)
        theirs = polygraphy_fold_constants(theirs, partitioning=partitioning, do_shape_inference=True,
                                           fold_shapes=True, error_ok=True, size_threshold=64 << 20,
                                           allow_onnxruntime_shape_inference=False)
        assert ours.SerializeToString() == theirs.SerializeToString()


def _encoder_with_an_expansion() -> onnx.ModelProto:
    from bench.common.encoders import build_encoder

    model = build_encoder(2)
    model.graph.initializer.append(_init("big_shape", np.array([1024, 1024], np.int64)))
    model.graph.node.extend([
        helper.make_node("ConstantOfShape", ["big_shape"], ["big"], name="big_fill",
                         value=_init("one", np.array([1.0], np.float32))),
        helper.make_node("Identity", ["big"], ["big_out"], name="big_read")])
    model.graph.output.append(helper.make_tensor_value_info("big_out", TensorProto.FLOAT, [1024, 1024]))
    return model


@pytest.mark.parametrize("build", [_expanding_model, _unsized_model, _encoder_with_an_expansion,
                                   lambda: onnx.load(LIGHT[0]) if LIGHT else _expanding_model()],
                         ids=["expanding", "unsized", "encoder", "light"])
def test_skipping_passes_for_settled_exclusions_writes_the_same_bytes(tmp_path, monkeypatch, build):
    """A node excluded on known sizes is excluded again by every later pass: fold_check.may_fold skips those
    passes for it (3x faster sanitize of an encoder with one expansion); the bytes are those of every pass."""
    from trtpipe.graph import sanitize as sanitize_module

    src = tmp_path / "src.onnx"
    onnx.save(build(), str(src))
    calls = []
    real_pass = sanitize_module.gs_fold_constants
    monkeypatch.setattr(sanitize_module, "gs_fold_constants", lambda *a, **k: calls.append(1) or real_pass(*a, **k))
    skipped = sanitize_model(src, tmp_path / "skipped.onnx")
    if build in (_expanding_model, _encoder_with_an_expansion):
        assert not calls  # the fast pass did it all: no onnx-graphsurgeon round trip
    monkeypatch.setattr(sanitize_module, "may_fold", lambda _model, _settled=(): True)  # every pass runs
    every = sanitize_model(src, tmp_path / "every.onnx")
    assert (tmp_path / "skipped.onnx").read_bytes() == (tmp_path / "every.onnx").read_bytes()
    assert skipped["left_unfolded"] == every["left_unfolded"] and skipped["left_unfolded"]
