"""`EngineRunner`: the built engine as a validation candidate, run with Polygraphy's `TrtRunner`.

Same interface as the runners in trtpipe.validate (`run(feeds)` -> {output name:
numpy array}). Decisions:
- The engine is loaded once (`TrtRunner(EngineFromBytes(BytesFromPath(path)))`) and
  activated once for all feed dicts (`run_all`).
- Dynamic shapes: each feed's shapes pick the first optimization profile whose
  [min, max] contains them (`engine.get_tensor_profile_shape(name, index)`); shapes no
  profile admits are a user error listing the ranges. The shapes themselves come
  from the inputs: validate generates them at the opt shape of profile 0 unless
  `data.inputs.<name>.shape` says otherwise (trtpipe.trt.profiles.opt_shapes).
- Feeds are cast to the engine's input types (an int64 token id array for an int32
  engine input); outputs are copied, since TrtRunner reuses its output buffers.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from trtpipe.errors import UserError
from trtpipe.trt.availability import import_tensorrt
from trtpipe.trt.profiles import profile_fitting


class EngineRunner:
    def __init__(self, engine_path: Path) -> None:
        self.engine_path = Path(engine_path)

    def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        return self.run_all([feeds])[0]

    def run_all(self, feeds_list: Sequence[Mapping[str, np.ndarray]]) -> list[dict[str, np.ndarray]]:
        trt = import_tensorrt()
        from polygraphy.backend.common import BytesFromPath
        from polygraphy.backend.trt import EngineFromBytes, TrtRunner
        from polygraphy.datatype import DataType

        results = []
        with TrtRunner(EngineFromBytes(BytesFromPath(str(self.engine_path)))) as runner:
            engine = runner.engine
            names = [engine.get_tensor_name(i) for i in range(engine.num_io_tensors)]
            inputs = [n for n in names if engine.get_tensor_mode(n) == trt.TensorIOMode.INPUT]
            outputs = [n for n in names if engine.get_tensor_mode(n) == trt.TensorIOMode.OUTPUT]
            ranges = _profile_ranges(engine, inputs)
            metadata = runner.get_input_metadata()
            current = 0
            for feeds in feeds_list:
                missing = [n for n in inputs if n not in feeds]
                if missing:
                    raise UserError(f"the engine needs the input(s) {missing}, which the sample inputs lack",
                                    "give every engine input in data.path or data.inputs")
                index = profile_fitting({n: np.shape(feeds[n]) for n in inputs}, ranges)
                if index is None:
                    raise UserError(f"input shapes {({n: list(np.shape(feeds[n])) for n in inputs})} fit no "
                                    f"optimization profile of the engine ({ranges})",
                                    "set data.inputs.<name>.shape within build.profiles")
                if index != current:
                    runner.set_profile(index)
                    current = index
                cast = {n: np.asarray(feeds[n]).astype(DataType.to_dtype(metadata[n].dtype, "numpy"), copy=False)
                        for n in inputs}
                produced = runner.infer(cast)
                results.append({n: np.array(produced[n], copy=True) for n in outputs if n in produced})
        return results


def _profile_ranges(engine, inputs: Sequence[str]) -> list[dict[str, dict[str, list[int]]]]:
    ranges = []
    for index in range(engine.num_optimization_profiles):
        profile = {}
        for name in inputs:
            if engine.is_shape_inference_io(name):
                continue
            try:
                low, opt, high = engine.get_tensor_profile_shape(name, index)
            except Exception:  # a static input: its one shape is the whole range
                low = opt = high = engine.get_tensor_shape(name)
            profile[name] = {"min": list(low), "opt": list(opt), "max": list(high)}
        ranges.append(profile)
    return ranges
