"""Make the `allowzero` attribute of Reshape explicit where that is always safe.

What the trap is. Since opset 14, Reshape has `allowzero` (default 0): with 0,
a 0 in the target shape means "copy this dimension from the input"; with 1 it
means a literal zero-sized dimension (NumPy and PyTorch semantics). TensorRT's
ONNX parser maps it to `IShuffleLayer::setZeroIsPlaceholder(!allowzero)`, so
current parsers are faithful. But the parsers of TensorRT 8.0 to 8.4.1 read the
attribute with no default and reject an opset >= 14 Reshape that omits it
("Attribute not found: allowzero", NVIDIA/TensorRT#1598; fixed in the 22.08
onnx-tensorrt release). Exporters (torch.onnx, tf2onnx) omit it.

What we change, and why that is safe. An opset >= 14 Reshape in the default
domain without the attribute gets `allowzero=0` written out. That is the
value ONNX already assumes, so every runtime computes exactly what it did
before, whatever the shape input holds (constant or computed, with or without
zeros), and old parsers accept the node.

What we do not change, and why. Rewriting a 0 in a shape into the input's
dimension, or switching `allowzero` between 0 and 1, changes the meaning when
an input dimension is truly 0 at run time (an empty batch), which no static
analysis of the file can rule out. An explicit `allowzero=1` is honoured by
TensorRT >= 8.0, so it is left as the author wrote it.
"""

from __future__ import annotations

import logging

import onnx

from trtpipe.onnxmodel.domains import DEFAULT_DOMAINS

logger = logging.getLogger(__name__)

ALLOWZERO_SINCE_OPSET = 14


def make_reshape_allowzero_explicit(model: onnx.ModelProto, opset: int) -> list[str]:
    """Add `allowzero=0` to main-graph Reshapes that omit it (opset >= 14); returns their names.

    Edits `model` in place (callers pass their own working copy).
    """
    if opset < ALLOWZERO_SINCE_OPSET:
        return []
    fixed = []
    for index, node in enumerate(model.graph.node):
        if node.op_type != "Reshape" or node.domain not in DEFAULT_DOMAINS:
            continue
        if any(attribute.name == "allowzero" for attribute in node.attribute):
            continue
        node.attribute.append(onnx.helper.make_attribute("allowzero", 0))
        fixed.append(node.name or f"<unnamed Reshape #{index}>")
    if fixed:
        logger.info("wrote allowzero=0 (the ONNX default) explicitly on %d Reshape nodes", len(fixed))
    return fixed
