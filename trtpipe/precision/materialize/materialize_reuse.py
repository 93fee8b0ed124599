"""One materialisation for the stored-tensor check and the stage's result when the plan is the same.

The stored-tensor check (auto_boundaries.py) materialises the plan as it stands after
smoothing to read which tensors it stores in FP16; the stage then materialises the final
plan. When the later passes (fewest Casts, the search, control-flow derivation) changed no
node's precision, that second call computes the same model again: on a 48-layer encoder,
about a third of the stage.

Decisions:
- Reused only when the final plan (every node's materialised precision) and
  `keep_io_types` equal the checked ones, and the model is the very object the check
  materialised (`Network.model`): `materialize` is a pure function of these three,
  so the result is the same model and report, byte for byte.
- The check's result is held on the `Network` (`last_materialised`) and taken by the
  stage exactly once; when it does not match, it is dropped before the stage
  materialises, so at most one materialised copy of the weights is alive at a time,
  as before.
- The check reads the materialised model and never edits it, nor its report.
- With the search on, the check's copy is dropped before the search (which materialises
  many plans of its own): the final plan is then materialised again, as before.
"""

from __future__ import annotations

from dataclasses import dataclass

import onnx

from trtpipe.precision.network.network import Network


@dataclass(frozen=True)
class Materialised:
    node_precision: dict[str, str]
    keep_io_types: bool
    model: onnx.ModelProto  # the input model (identity is compared, not contents)
    mixed: onnx.ModelProto
    report: dict


def materialize_remembered(net: Network, node_precision: dict[str, str], keep_io_types: bool):
    """`materialize(net.model, ...)`, remembered on `net` for `materialize_or_reuse`."""
    from trtpipe.precision.materialize.materialize import materialize

    net.last_materialised = None  # the previous round's copy is not needed any more
    mixed, report = materialize(net.model, node_precision, keep_io_types=keep_io_types)
    net.last_materialised = Materialised(dict(node_precision), keep_io_types, net.model, mixed, report)
    return mixed, report


def materialize_or_reuse(net: Network, model: onnx.ModelProto, node_precision: dict[str, str],
                         keep_io_types: bool):
    """The materialised `model`: the check's result when it was made from the same model and plan."""
    from trtpipe.precision.materialize.materialize import materialize

    remembered, net.last_materialised = net.last_materialised, None
    if (remembered is not None and remembered.model is model and remembered.keep_io_types == keep_io_types
            and remembered.node_precision == node_precision):
        return remembered.mixed, remembered.report
    del remembered
    return materialize(model, node_precision, keep_io_types=keep_io_types)
