"""Differential check: does this checkout's upgrade_opset write the same model as another's (main's)?

    python bench/same_output_upgrade.py prepare DIR            # inputs: sanitized models, one folder per case
    PYTHONPATH=/work/main python bench/same_output_upgrade.py upgrade DIR/inputs DIR/main
    PYTHONPATH=$PWD       python bench/same_output_upgrade.py upgrade DIR/inputs DIR/new
    python bench/same_output_upgrade.py compare DIR/main DIR/new

Cases (`prepare`, run from the repository root): the built-in models (and t5/gpt2/transformer
with their nodes shuffled), bench encoders, the wild corpus in ~/.cache/trtpipe/wild/models,
every LayerNorm form of tests/graph (affine or not, opsets 17/18, dynamic batch, wrong 1/N,
epsilon as input, LayerNorm2d, constants as nodes, ...), fuzz_graphs' mutated graphs and
the LayerNorm forms mutated the same way (edges rewired, attributes changed, nodes dropped,
intermediates made outputs). Each is sanitized first, as the pipeline does (upgrade reads
sanitize's output); a model sanitize refuses is used as it is. `upgrade` runs
`trtpipe.graph.upgrade.upgrade_model` (target 17, fusion on) of whichever trtpipe is on
PYTHONPATH and writes the model, its report (or the error) and the time; `compare` says
which cases differ, file by file, and sums the times.
"""

from __future__ import annotations

import json
import sys
import time
import traceback
from pathlib import Path


def prepare(out: Path, fuzz_examples: int = 120, mutated_forms: int = 200) -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from trtpipe.graph.sanitize import sanitize_model

    inputs = out / "inputs"
    inputs.mkdir(parents=True, exist_ok=True)
    for name, model in _cases(fuzz_examples, mutated_forms):
        folder = inputs / name
        folder.mkdir(exist_ok=True)
        raw = folder / "raw.onnx"
        if isinstance(model, Path):
            raw = model
        else:
            raw.write_bytes(model if isinstance(model, bytes) else model.SerializeToString())
        try:
            sanitize_model(raw, folder / "model.onnx")
        except Exception as error:  # noqa: BLE001 - unsanitizable: upgrade reads the raw model
            (folder / "model.onnx").write_bytes(raw.read_bytes())
            (folder / "sanitize_error.txt").write_text(f"{type(error).__name__}: {error}")
        print(name, flush=True)


def _cases(fuzz_examples: int, mutated_forms: int):
    import numpy as np
    from bench.encoders import build_encoder
    from tests.graph import graphs
    from tests.graph.layernorm_forms import FORMS, layernorm_form
    from trtpipe.models import BUILTIN_MODELS, builtin_model

    for name in BUILTIN_MODELS:
        yield f"builtin_{name}", builtin_model(name)
    for name, seed in (("t5", 0), ("gpt2", 1), ("transformer", 2)):
        yield f"shuffled_{name}", _shuffled(builtin_model(name), seed)
    for layers in (1, 2, 4):
        yield f"encoder_{layers}", build_encoder(layers)
    for folder in sorted((Path.home() / ".cache/trtpipe/wild/models").glob("*")):
        for path in sorted(folder.glob("*.onnx")):
            yield f"wild_{folder.name}", path
    forms = []
    for variance in ("centred_pow", "centred_mul", "moments_mul", "moments_pow", "jax2tf"):
        for normalise in ("div", "reciprocal", "rsqrt", "reciprocal_gamma", "keras"):
            for affine in (True, False):
                if not affine and normalise in ("reciprocal_gamma", "keras"):
                    continue
                for opset in (17, 18):
                    forms.append((f"form_{variance}_{normalise}_{int(affine)}_{opset}",
                                  layernorm_form(variance, normalise, affine=affine, opset=opset)))
    for variance, normalise in FORMS:
        forms.append((f"form_{variance}_{normalise}_eps_input", layernorm_form(variance, normalise, eps_input=True)))
        forms.append((f"form_{variance}_{normalise}_axes01", layernorm_form(variance, normalise, axes=(1, 2))))
        forms.append((f"form_{variance}_{normalise}_axis1", layernorm_form(variance, normalise, axes=(1,))))
    for dynamic in (1, 2):
        forms.append((f"form_jax2tf_dynamic{dynamic}", layernorm_form("jax2tf", "reciprocal_gamma", dynamic=dynamic)))
    forms.append(("form_jax2tf_wrong_n", layernorm_form("jax2tf", "reciprocal_gamma", count=15)))
    options = [dict(), dict(affine=False), dict(constants_as_nodes=True), dict(gamma_shape=(1, 1, 8)),
               dict(gamma_shape=(5, 8)), dict(mean_also_used=True), dict(swapped=True), dict(axes=(1, 2)),
               dict(axes=(-2, -1)), dict(opset=18), dict(shape=(2, 5, 8), scope="")]
    for index, option in enumerate(options):
        try:
            forms.append((f"graph_layernorm_{index}", graphs.layernorm_graph(**option)))
        except Exception:  # noqa: BLE001 - an option this checkout's helper does not take
            pass
    forms.append(("graph_layernorm2d", graphs.layernorm2d_graph()))
    yield from forms
    rng = np.random.default_rng(7)
    for index in range(mutated_forms):
        name, model = forms[int(rng.integers(len(forms)))]
        yield f"mutated_{index}_{name}", _mutated(model, rng)
    yield from _fuzzed(fuzz_examples)


def _shuffled(model, seed: int):
    import numpy as np
    import onnx

    shuffled = onnx.ModelProto()
    shuffled.CopyFrom(model)
    order = np.random.default_rng(seed).permutation(len(model.graph.node))
    del shuffled.graph.node[:]
    shuffled.graph.node.extend(model.graph.node[int(i)] for i in order)
    return shuffled


def _mutated(model, rng):
    """One to three of: rewire an input, change/drop an attribute, drop a node, make an
    intermediate a graph output, give a node a doc string, duplicate a consumer."""
    import onnx
    from onnx import helper

    model = onnx.ModelProto.FromString(model.SerializeToString())
    graph = model.graph
    for _ in range(int(rng.integers(1, 4))):
        if not graph.node:
            break
        node = graph.node[int(rng.integers(len(graph.node)))]
        tensors = [i.name for i in graph.initializer] + [o for n in graph.node for o in n.output] + ["x", ""]
        kind = rng.choice(["edge", "attr", "attr_drop", "drop", "output", "doc", "consumer", "keepdims"])
        if kind == "edge" and node.input:
            node.input[int(rng.integers(len(node.input)))] = str(rng.choice(tensors))
        elif kind == "attr":
            name = str(rng.choice(["axes", "keepdims", "axis", "bogus"]))
            kept = [a for a in node.attribute if a.name != name]
            value = rng.choice([0, 1, -1, 2.5, "s"]) if name != "axes" else [int(rng.integers(-3, 3))]
            value = value.item() if hasattr(value, "item") else value
            del node.attribute[:]
            node.attribute.extend(kept + [helper.make_attribute(name, value)])
        elif kind == "attr_drop" and node.attribute:
            del node.attribute[int(rng.integers(len(node.attribute)))]
        elif kind == "drop":
            graph.node.remove(node)
        elif kind == "output" and node.output:
            graph.output.append(helper.make_tensor_value_info(node.output[0], onnx.TensorProto.FLOAT, None))
        elif kind == "doc":
            node.doc_string = "mutated"
        elif kind == "consumer" and node.output:
            graph.node.append(helper.make_node("Relu", [node.output[0]], [f"extra_{len(graph.node)}"]))
            graph.output.append(helper.make_tensor_value_info(f"extra_{len(graph.node) - 1}",
                                                              onnx.TensorProto.FLOAT, None))
        elif kind == "keepdims":
            for attribute in node.attribute:
                if attribute.name == "keepdims":
                    attribute.i = 1 - attribute.i
    return model.SerializeToString()


def _fuzzed(count: int):
    from hypothesis import HealthCheck, given, settings

    from bench.fuzz_graphs import mutated_models

    drawn: list[bytes] = []

    @settings(max_examples=count, derandomize=True, database=None, deadline=None,
              suppress_health_check=list(HealthCheck))
    @given(mutated_models())
    def collect(model_bytes):
        drawn.append(model_bytes)

    collect()
    for index, model_bytes in enumerate(dict.fromkeys(drawn)):
        yield f"fuzz_{index}", model_bytes


def upgrade(inputs: Path, out: Path) -> None:
    from trtpipe.graph.upgrade import upgrade_model

    for folder in sorted(p for p in inputs.iterdir() if p.is_dir()):
        target = out / folder.name
        target.mkdir(parents=True, exist_ok=True)
        started = time.perf_counter()
        try:
            report = upgrade_model(folder / "model.onnx", target / "model.onnx")
            outcome = {"report": report}
        except Exception as error:  # noqa: BLE001 - the error is part of the behaviour compared
            outcome = {"error": f"{type(error).__name__}: {error}",
                       "where": traceback.format_exc().splitlines()[-3:-1]}
        outcome["seconds"] = time.perf_counter() - started
        (target / "outcome.json").write_text(json.dumps(outcome, indent=1, sort_keys=True, default=str))


def compare(reference: Path, new: Path) -> int:
    differing, times = [], [0.0, 0.0]
    for folder in sorted(p for p in reference.iterdir() if p.is_dir()):
        other = new / folder.name
        problems = []
        for path in sorted(folder.iterdir()):
            if path.name == "outcome.json":
                one, two = (json.loads(p.read_text()) for p in (path, other / path.name))
                times[0] += one.pop("seconds")
                times[1] += two.pop("seconds")
                one.pop("where", None)
                two.pop("where", None)
                if one != two:
                    problems.append(f"outcome {json.dumps(one)[:300]} != {json.dumps(two)[:300]}")
            elif not (other / path.name).exists() or path.read_bytes() != (other / path.name).read_bytes():
                problems.append(f"{path.name} differs")
        extra = {p.name for p in other.iterdir()} - {p.name for p in folder.iterdir()}
        if extra:
            problems.append(f"only in {new}: {sorted(extra)}")
        if problems:
            differing.append(folder.name)
            print(f"DIFF {folder.name}: " + "; ".join(problems))
    total = len([p for p in reference.iterdir() if p.is_dir()])
    print(f"{total - len(differing)}/{total} cases identical; upgrade time {times[0]:.2f} s -> {times[1]:.2f} s")
    return 1 if differing else 0


if __name__ == "__main__":
    command, *arguments = sys.argv[1:]
    if command == "prepare":
        prepare(Path(arguments[0]))
    elif command == "upgrade":
        upgrade(Path(arguments[0]), Path(arguments[1]))
    elif command == "compare":
        sys.exit(compare(Path(arguments[0]), Path(arguments[1])))
    else:
        sys.exit(__doc__)
