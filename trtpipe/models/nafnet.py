"""Built-in `nafnet`: NAFNet blocks whose channel-wise LayerNorm overflows in FP16.

What it reproduces (DESIGN.md problem 3, the NAFNet artifact reports): NAFNet's
`LayerNorm2d` normalises over the channel axis and is exported decomposed
(ReduceMean/Sub/Pow/ReduceMean/Add/Sqrt/Div/Mul/Add over axis 1). The intro
convolution works on un-normalised features, so channels differ from their
per-pixel mean by several hundred: `Pow(x - mean, 2)` reaches ~10^5-10^6 and even
the variance (the second ReduceMean) is above FP16's 65504. In FP32 everything
is finite and the output is an ordinary image; in FP16 the variance becomes inf,
the normalised features collapse to the LayerNorm bias and the restored image
shows artifacts.

Layout (a 2x super-resolution variant, as in NAFSSR): intro Conv 3->16, two
NAFBlocks in `encoders.0`, PixelShuffle upsample (1x1 Conv to 4*16 channels,
DepthToSpace CRD, which is how PyTorch exports `nn.PixelShuffle`), ending Conv
16->3, plus a bilinear 2x Resize of the input image as the global residual.
Output `restored` is [1, 3, 64, 64].

Decisions:
- LayerNorm2d weight/bias and the blocks' beta/gamma are stored as [1, C, 1, 1]
  initializers, i.e. the `.view(1, C, 1, 1)` already folded as the exporter
  leaves it.
- Resize is written as PyTorch's symbolic writes
  `F.interpolate(mode="bilinear", align_corners=False)`: empty roi constant,
  `pytorch_half_pixel` (equal to `half_pixel` for outputs larger than 1 pixel),
  `nearest_mode="floor"`.
- The block branch contributes a sizeable share of the features that reach the
  output, so the FP16 collapse is visible in the image and not only in an
  intermediate tensor.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto

from trtpipe.models._builders import (
    GraphBuilder,
    add_decomposed_layer_norm,
    module_scope,
    seeded_rng,
    tensor_info,
)

OPSET = 17
SEED = 1017
HEIGHT = WIDTH = 32
UPSCALE = 2
CHANNELS = 16
BLOCKS = 2
LAYER_NORM_EPS = 1e-6  # NAFNet's value

# Intro conv weight scale: un-normalised features whose channels differ by
# several hundred (> 256, the FP16 overflow point of their square).
INTRO_WEIGHT_STD = 75.0
# RMS of the residual stream that reaches the upsampler (measured ~190-230);
# the upsampler divides it out so the ending conv sees unit-scale features.
FEATURE_RMS = 250.0
# The 1x1 convs that return a block's branch to the residual stream (conv3,
# conv5): their inputs are a few units, their outputs ~100, so after beta/gamma
# (0.5-1.0) the branch is a sizeable share of the stream and the FP16 collapse of
# the LayerNorm shows in the image (PSNR ~30 dB) and not only in intermediates.
BRANCH_CONV_STD = 6.0
# The ending conv predicts a residual of a few hundredths of the image range.
ENDING_WEIGHT_STD = 0.08 / np.sqrt(CHANNELS * 9)


def build_nafnet() -> onnx.ModelProto:
    """The network as described in the module docstring; deterministic to the byte."""
    rng = seeded_rng(SEED)
    builder = GraphBuilder()
    features = _conv(builder, rng, "intro", "image", CHANNELS, 3, kernel=3, std=INTRO_WEIGHT_STD)
    for index in range(BLOCKS):
        features = _naf_block(builder, rng, f"encoders.0.{index}", features)
    features = _conv(
        builder, rng, "ups.0.0", features, CHANNELS * UPSCALE**2, CHANNELS, kernel=1,
        std=1.0 / (FEATURE_RMS * np.sqrt(CHANNELS)), bias=False,
    )
    features = builder.node("DepthToSpace", _scope("ups.0.1"), [features], blocksize=UPSCALE, mode="CRD")
    residual = _conv(builder, rng, "ending", features, 3, CHANNELS, kernel=3, std=ENDING_WEIGHT_STD)
    upsampled = _bilinear_upsample(builder, "image")
    builder.node("Add", "", [residual, upsampled], output_names=["restored"])
    return builder.model(
        "nafnet_sr",
        inputs=[tensor_info("image", TensorProto.FLOAT, [1, 3, HEIGHT, WIDTH])],
        outputs=[
            tensor_info("restored", TensorProto.FLOAT, [1, 3, HEIGHT * UPSCALE, WIDTH * UPSCALE])
        ],
        opset=OPSET,
        doc_string=__doc__.split("\n\n")[0],
    )


def _scope(qualified_name: str) -> str:
    """Exporter scope of a NAFNet module; `encoders` and `ups` are ModuleLists."""
    return module_scope(qualified_name, module_lists=("encoders", "ups"))


def _conv(
    builder: GraphBuilder,
    rng: np.random.RandomState,
    prefix: str,
    x: str,
    out_channels: int,
    in_channels: int,
    kernel: int,
    std: float,
    group: int = 1,
    bias: bool = True,
) -> str:
    """`nn.Conv2d` with `same` padding, weights named `<prefix>.weight` / `<prefix>.bias`."""
    shape = (out_channels, in_channels // group, kernel, kernel)
    inputs = [x, builder.initializer(f"{prefix}.weight", rng.normal(0.0, std, shape).astype(np.float32))]
    if bias:
        values = rng.normal(0.0, 0.01, out_channels).astype(np.float32)
        inputs.append(builder.initializer(f"{prefix}.bias", values))
    pad = kernel // 2
    return builder.node(
        "Conv", _scope(prefix), inputs,
        dilations=[1, 1], group=group, kernel_shape=[kernel, kernel],
        pads=[pad, pad, pad, pad], strides=[1, 1],
    )


def _channel_parameter(builder: GraphBuilder, name: str, values: np.ndarray) -> str:
    return builder.initializer(name, values.astype(np.float32).reshape(1, -1, 1, 1))


def _layer_norm_2d(builder: GraphBuilder, rng: np.random.RandomState, prefix: str, x: str) -> str:
    """NAFNet's LayerNorm2d: normalise over channels (axis 1) at every pixel."""
    weight = _channel_parameter(builder, f"{prefix}.weight", rng.uniform(0.8, 1.2, CHANNELS))
    bias = _channel_parameter(builder, f"{prefix}.bias", rng.normal(0.0, 0.1, CHANNELS))
    return add_decomposed_layer_norm(builder, _scope(prefix), x, weight, bias, 1, LAYER_NORM_EPS)


def _simple_gate(builder: GraphBuilder, scope: str, x: str, channels: int) -> str:
    """`x1, x2 = x.chunk(2, dim=1); return x1 * x2` as Split(axis=1) + Mul."""
    halves = builder.constant(scope, np.array([channels // 2, channels // 2], dtype=np.int64))
    first, second = builder.node("Split", scope, [x, halves], num_outputs=2, axis=1)
    return builder.node("Mul", scope, [first, second])


def _naf_block(builder: GraphBuilder, rng: np.random.RandomState, prefix: str, block_input: str) -> str:
    """One NAFBlock: norm, conv, depthwise conv, gate, channel attention, conv; then the FFN half."""
    scope = _scope(prefix)
    wide = 2 * CHANNELS
    # The LayerNorm brings the hundreds of the residual stream down to units;
    # conv1/conv4 (std 2/sqrt(C)) keep the gate inputs at a few units.
    x = _layer_norm_2d(builder, rng, f"{prefix}.norm1", block_input)
    x = _conv(builder, rng, f"{prefix}.conv1", x, wide, CHANNELS, kernel=1, std=2.0 / np.sqrt(CHANNELS))
    x = _conv(builder, rng, f"{prefix}.conv2", x, wide, wide, kernel=3, std=1.0 / 3.0, group=wide)
    x = _simple_gate(builder, scope, x, wide)
    pooled = builder.node("GlobalAveragePool", _scope(f"{prefix}.sca.0"), [x])
    attention = _conv(
        builder, rng, f"{prefix}.sca.1", pooled, CHANNELS, CHANNELS, kernel=1, std=0.05 / np.sqrt(CHANNELS)
    )
    x = builder.node("Mul", scope, [x, attention])
    x = _conv(builder, rng, f"{prefix}.conv3", x, CHANNELS, CHANNELS, kernel=1, std=BRANCH_CONV_STD)
    beta = _channel_parameter(builder, f"{prefix}.beta", rng.uniform(0.5, 1.0, CHANNELS))
    x = builder.node("Mul", scope, [x, beta])
    y = builder.node("Add", scope, [block_input, x])

    x = _layer_norm_2d(builder, rng, f"{prefix}.norm2", y)
    x = _conv(builder, rng, f"{prefix}.conv4", x, wide, CHANNELS, kernel=1, std=2.0 / np.sqrt(CHANNELS))
    x = _simple_gate(builder, scope, x, wide)
    x = _conv(builder, rng, f"{prefix}.conv5", x, CHANNELS, CHANNELS, kernel=1, std=BRANCH_CONV_STD)
    gamma = _channel_parameter(builder, f"{prefix}.gamma", rng.uniform(0.5, 1.0, CHANNELS))
    x = builder.node("Mul", scope, [x, gamma])
    return builder.node("Add", scope, [y, x])


def _bilinear_upsample(builder: GraphBuilder, image: str) -> str:
    """`F.interpolate(image, scale_factor=2, mode="bilinear", align_corners=False)`."""
    no_roi = builder.constant("", np.zeros(0, dtype=np.float32))
    scales = builder.constant("", np.array([1.0, 1.0, UPSCALE, UPSCALE], dtype=np.float32))
    return builder.node(
        "Resize", "", [image, no_roi, scales],
        coordinate_transformation_mode="pytorch_half_pixel", mode="linear", nearest_mode="floor",
    )
