"""The additive attention mask of BERT-style encoders as ONNX nodes, for the token-input test models
(tests/test_cli_integer_ranges.py, tests/test_cli_sample_dims.py): an int {0,1} mask [batch, seq]
becomes (1 - mask) * -1e4 on a third axis, added to the hidden states. Read by the sample-data rules
as "an input used only as a mask" (values {0,1})."""

from __future__ import annotations

import numpy as np
from onnx import NodeProto, TensorProto, helper, numpy_helper


def mask_bias_weights() -> list[TensorProto]:
    return [numpy_helper.from_array(np.array([2], np.int64), "axis2"),
            numpy_helper.from_array(np.array(1.0, np.float32), "one"),
            numpy_helper.from_array(np.array(-1e4, np.float32), "big")]


def masked_add_nodes(mask: str, hidden: str, output: str) -> list[NodeProto]:
    """`output` = `hidden` + (1 - float(`mask`[..., None])) * -1e4."""
    return [
        helper.make_node("Unsqueeze", [mask, "axis2"], ["mask3"], name="unsqueeze_mask"),
        helper.make_node("Cast", ["mask3"], ["maskf"], name="cast_mask", to=TensorProto.FLOAT),
        helper.make_node("Sub", ["one", "maskf"], ["inverted"], name="invert_mask"),
        helper.make_node("Mul", ["inverted", "big"], ["bias"], name="mask_bias"),
        helper.make_node("Add", [hidden, "bias"], [output], name="masked"),
    ]
