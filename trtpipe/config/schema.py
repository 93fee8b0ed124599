"""Dataclass schemas for every config node.

Decision: every node has a schema so that a typo in a key or a wrong type fails
at compose time with the full key path. YAML variants in `conf/<stage>/` extend
these schemas (their defaults list starts with `schema`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from trtpipe.config.build_schema import BuildConfig


@dataclass
class ModelConfig:
    # An ONNX file; relative paths are relative to the directory trtpipe was started in.
    path: Optional[str] = None
    # Used when `path` is unset: one of trtpipe.models.BUILTIN_MODELS.
    builtin: str = "transformer"


@dataclass
class CacheConfig:
    # Decision (cache/cache_home.py): TRTPIPE_CACHE, else the user's cache directory
    # ($XDG_CACHE_HOME/trtpipe/artifacts or ~/.cache/trtpipe/artifacts), so every working directory and every
    # run of a CI job share one cache; cache.dir=PATH wins over both.
    dir: str = "${trtpipe.cache_home:}"
    # Seconds to wait for another process computing the same stage.
    lock_timeout: float = 7200.0
    # A bound on the cache folder's size (500M, 2G, 1.5Gi; cache/manage.py), enforced after each
    # run: least recently used entries are deleted, never one this run used or another run holds.
    # null: unbounded (as pip's cache; `trtpipe-cache prune` bounds it by hand).
    max_size: Optional[str] = None
    # A remote tier under the same keys (cache/remote/): s3://BUCKET/PREFIX, any S3-compatible store;
    # endpoint, region and credentials from the usual AWS environment and config files
    # (AWS_ENDPOINT_URL too). null: local only (`--no-remote` is cache.remote=null for one run).
    remote: Optional[str] = None
    # read (look up, never upload: CI that trusts a cache filled by builders) | write (upload, never
    # look up) | readwrite.
    remote_mode: str = "readwrite"


@dataclass
class RunConfig:
    # Which stage models and engines the run directory holds (cache/publish.py): all (every
    # stage's, as read-only hard links to the cache's files or reflinks: no extra disk on one
    # file system) | final (the last stage's that produced one). Plans, reports and logs are
    # always there; a failed run's directory holds no model (they stay in the cache).
    artifacts: str = "all"


@dataclass
class SanitizeConfig:
    infer_shapes: bool = True
    fold_constants: bool = True
    cleanup: bool = True
    toposort: bool = True
    fix_reshape_allowzero: bool = True
    # A Cast to the type its input already has is removed (trtpipe/graph/passes/noop_casts.py): it changes no
    # value, and the precision stage would respect it as an author's precision decision.
    remove_noop_casts: bool = True
    # An INT32 DequantizeLinear feeding a Conv/Gemm bias (ONNX Runtime's QDQ format) is folded into the FP32
    # bias ONNX Runtime computes (trtpipe/graph/passes/bias_dequantize.py): with it, TensorRT-RTX 1.7.1 lowered
    # every Q/DQ of the model to FP32 (issue 31). false: the DQs stay (build's parser check warns about them).
    fold_bias_dequantize: bool = True
    # Folding never inflates a model (trtpipe/graph/fold/growth.py): a node whose folded outputs would be more
    # than fold_growth_limit x max(its inputs' bytes, fold_growth_floor_bytes) stays in the graph (TensorRT
    # evaluates it at build time). null: no limit (Polygraphy's folding as is, up to 64 MiB per tensor).
    fold_growth_limit: Optional[float] = 2.0
    fold_growth_floor_bytes: int = 4096


@dataclass
class UpgradeOpsetConfig:
    # null (the default): opset 17 (it introduced LayerNormalization, which keeps the variance inside one
    # op), 19 for a model holding QuantizeLinear/DequantizeLinear (FP16 scales), or the model's own opset
    # when that is higher. A number pins the target (graph/upgrade.py).
    target: Optional[int] = None
    fuse_layernorm: bool = True


@dataclass
class InputSpec:
    # Integers are drawn from [low, high) (high exclusive), floats uniformly from [low, high).
    low: float = 0.0
    high: float = 1.0
    dtype: str = "float32"
    # Needed only for inputs with dynamic dimensions.
    shape: Optional[List[int]] = None


@dataclass
class DataConfig:
    # Sample inputs: .npz keyed by input name, Polygraphy JSON inputs, or a folder of .npz files
    # (one input set each, in name order; every stage that runs the model uses every set), or a list of
    # .npz files and such folders (one data set: their sets in the order listed). Unset: generated.
    # Typed Any so a list is accepted (OmegaConf has no Union of str and list); checked by
    # trtpipe.config.check.
    path: Any = None
    seed: int = 0
    # Feed dicts generated per run (each stage that runs the model uses all of them).
    iterations: int = 2
    # Per input name: {low, high, dtype, shape} (the fields of InputSpec). For built-in
    # models, realistic ranges are filled in automatically. Typed Any (like
    # precision.rules) so `+data.inputs.NAME={low:0,high:30522,dtype:int64}` works on the
    # command line; each entry's fields are checked by trtpipe.config.check.
    inputs: Dict[str, Any] = field(default_factory=dict)
    # inf/NaN in the sample inputs is refused (exit 2): positions where the reference is inf/NaN
    # cannot be compared. true: the model is meant to take them (validate.min_compared still applies).
    allow_nonfinite: bool = False
    # The length of a generated sequence: every dynamic dim but the first of an integer input the model
    # states a range for (token ids, masks) that no other input sizes (trtpipe/sample_dims.py).
    sequence_length: int = 128


@dataclass
class AutoPrecisionConfig:
    # Keep FP32 every node whose output (or hidden intermediate) exceeds this on the
    # sample inputs; null disables the rule. 4096 leaves 16x headroom below FP16's 65504
    # for inputs larger than the samples.
    max_abs: Optional[float] = 4096.0
    # The same rule for the output of a MatMul/Gemm/Conv/ConvTranspose (auto_range.py: its sums
    # accumulate in FP32 inside the kernel, only the stored output is FP16); null: max_abs.
    heavy_max_abs: Optional[float] = None
    # Constants beyond FP16's range or flushing to zero: keep_fp32 | saturate | off.
    constants: str = "keep_fp32"
    # LayerNorm/RMSNorm groups (decomposed or fused) and Softmax are each one unit: FP32 as a
    # whole when `protect` says so. evidence: only when a member is out of range or its FP16
    # statistics lose what the output needs (precision/auto/evidence_groups.py); always: whatever
    # their ranges (the behaviour before 2026-11).
    normalization: bool = True
    softmax: bool = False
    protect: str = "evidence"
    # Cheap default nodes join the FP32 islands where that removes Casts (fewest_casts.py).
    fewest_casts: bool = True
    # Absorb isolated low-precision islands of at most this many cheap nodes (0: off).
    # 2 by default: an island that small between FP32 nodes costs two Casts and saves
    # nothing (e.g. the `1 - mask` Sub between an int->float Cast and the FP32 mask Mul).
    island_size: int = 2


@dataclass
class SearchConfig:
    # Opt-in: replace the automatic plan by the plan (found by trial) with the largest
    # low-precision FLOP share that passes these tolerances under the faithful FP16
    # emulation (trtpipe/search/fp32_set.py).
    enabled: bool = False
    max_trials: int = 30  # a trial is ~0.1 s on the built-in t5; 30 reach its best plan
    # Interpolated from validate.* in conf/precision/default.yaml, so the search and the
    # validation judge by the same bounds. Decision: typed Any, not Dict[str, Any]: the
    # interpolation resolves to a ToleranceConfig node, which OmegaConf refuses to store in a
    # Dict[str, Any] (`trtpipe --cfg job --resolve` failed with "Cannot assign ToleranceConfig
    # to Dict[str, Any]"); its keys and values are checked by trtpipe.config.tolerance_check.
    # A mapping the user sets here inherits the bounds it lacks from validate.tolerance
    # (trtpipe/config/search_inherit.py), as `outputs` inherits from validate.outputs.
    tolerance: Any = field(default_factory=dict)
    outputs: Dict[str, Any] = field(default_factory=dict)
    # Interpolated from validate.float_model: a quantized model's trials are judged by validate's
    # anchored criterion (trtpipe/validate/anchored.py), anchored on this model when it is set.
    float_model: Optional[str] = None


# A trial is one materialise + emulation of the plan: ~0.1 s on the built-in models, ~3 s on a
# 4.5 MB U^2-Net at 320x320; the repairs measured needed 5-25 (bench/repair). The time bound keeps a
# 300 MB model's repair to minutes whatever its trials cost.
REPAIR_DEFAULTS = {"enabled": True, "max_trials": 40, "max_seconds": 600.0}


def repair_settings(value) -> dict:
    """`precision.repair` as {enabled, max_trials, max_seconds}: a bool sets `enabled` alone, a mapping
    fills what it lacks from REPAIR_DEFAULTS; anything else is a UserError naming the key."""
    from trtpipe.errors import UserError

    if isinstance(value, bool):
        return {**REPAIR_DEFAULTS, "enabled": value}
    if not isinstance(value, dict):
        raise UserError(f"precision.repair is {value!r}, neither true/false nor a mapping such as "
                        "{max_trials: 80}", "precision.repair=true")
    unknown = sorted(set(value) - set(REPAIR_DEFAULTS))
    if unknown:
        raise UserError(f"precision.repair has no key {unknown[0]!r}; valid keys under 'precision.repair' are: "
                        f"{', '.join(REPAIR_DEFAULTS)}", "spell it as one of those")
    settings = {**REPAIR_DEFAULTS, **value}
    checks = {"enabled": (lambda v: isinstance(v, bool), "not true or false", "precision.repair.enabled=true"),
              # 2: the check of the automatic plan and one repair trial
              "max_trials": (lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 2,
                             "not a whole number of trials of at least 2", "precision.repair.max_trials=40"),
              "max_seconds": (lambda v: isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0,
                              "not a positive number of seconds", "precision.repair.max_seconds=600")}
    for key, (valid, expected, fix) in checks.items():
        if not valid(settings[key]):
            raise UserError(f"precision.repair.{key} is {settings[key]!r}, {expected}", fix)
    return {**settings, "max_seconds": float(settings["max_seconds"])}


@dataclass
class PrecisionConfig:
    default: str = "fp16"  # fp16 | bf16 | fp32 (baseline)
    # name -> {match: exact|regex|op_type (default exact), pattern, precision: fp32|fp16|bf16
    # (default fp32)}. Decision: typed Any, not a dataclass, so the command line can add a
    # whole rule as `+precision.rules.NAME={match:regex,pattern:'...',precision:fp32}`
    # (OmegaConf cannot assign a dict literal into a dict of dataclasses); each rule's
    # fields are checked by trtpipe.precision.network.rules.compile_rules with the full key.
    rules: Dict[str, Any] = field(default_factory=dict)
    keep_io_types: bool = True
    on_unmatched: str = "error"  # error | warn
    # Leave FP16/FP32 islands an author already placed (mixed-precision models) as they are.
    # Low-precision defaults only: `default: fp32` is the baseline and promotes them (plan/baseline.py).
    respect_authored: bool = True
    auto: AutoPrecisionConfig = field(default_factory=AutoPrecisionConfig)
    search: SearchConfig = field(default_factory=SearchConfig)
    # When the automatic plan breaks a bound of precision.search.tolerance (validate's unless set),
    # move the fewest FLOPs to FP32 that make every bound hold (trtpipe/search/repair.py):
    # {enabled, max_trials, max_seconds}, or false/true for enabled alone. Decision: typed Any, not
    # a dataclass, so `precision.repair=false` works as the issue asked (a dataclass node refuses
    # a bool); its keys and types are checked by trtpipe.config.repair_settings at compose time.
    repair: Any = field(default_factory=lambda: dict(REPAIR_DEFAULTS))
    # Print the network's node names, op types and tensor names, then stop.
    list_only: bool = False


@dataclass
class PromoteOutputsConfig:
    # Patterns over tensor names and over node names (a node promotes all its outputs).
    tensors: List[str] = field(default_factory=list)
    nodes: List[str] = field(default_factory=list)
    match: str = "exact"  # exact | regex (full match)
    # fp32: a promoted FP16 tensor t is exposed as the FP32 output t__fp32; native: as is.
    as_type: str = "fp32"
    # Warn above this many: in TensorRT, many extra outputs break fusion and change results.
    warn_above: int = 16


@dataclass
class ToleranceConfig:
    # Each bound is judged only when set. Non-finite candidate values always fail.
    # Metric definitions: trtpipe/numerics/metrics.py; default values: validate/compare.py.
    max_abs: Optional[float] = None
    max_rel: Optional[float] = None
    # 99th percentile of the elementwise absolute / relative error (Polygraphy's quantile stat).
    abs_p99: Optional[float] = None
    rel_p99: Optional[float] = None
    # ||candidate - reference|| / ||reference||.
    rel_l2: Optional[float] = 0.044
    cosine_min: Optional[float] = 0.999
    # Image (4-D) outputs only.
    psnr_min: Optional[float] = 40.0
    # Image (4-D) outputs only: the share of elements more than one level off once both are
    # quantised to 8 bits over the reference's range (an upper bound in [0, 1]).
    pixels_off_8bit: Optional[float] = None
    # Outputs with a class axis (axis 1 of 4-D, else the last): the share of positions whose
    # arg-max agrees (a lower bound in [0, 1]); for probability / logit outputs.
    argmax_agree_min: Optional[float] = None


@dataclass
class ValidateConfig:
    # emulated: the mixed-precision ONNX with every FP16 tensor truly rounded;
    # tensorrt: the built engine (when the build stage produced one).
    candidates: List[str] = field(default_factory=lambda: ["emulated", "tensorrt"])
    tolerance: ToleranceConfig = field(default_factory=ToleranceConfig)
    # Per-output overrides: output name -> {any key of `tolerance`}.
    # Typed Any so a whole override can be given on the command line (like precision.rules).
    outputs: Dict[str, Any] = field(default_factory=dict)
    # On failure, name the first node (topological order) whose output goes non-finite
    # (where the reference is finite) and the first whose error exceeds this fraction of
    # the reference's max |x|.
    localize: bool = True
    localize_threshold: float = 0.01
    # accuracy.png: per node, reference magnitude against the FP16 limit and the error.
    plot: bool = True
    # Decision: the picture is drawn when validation fails (that is when it is read); a passing
    # run draws it only with plot_passed=true. Drawing it needs a localisation of every node and
    # matplotlib: about half of a passing validate stage's time on the built-in transformer.
    plot_passed: bool = False
    # The share of each output's positions that must be compared (where the reference is
    # finite); an output compared at fewer, or empty, fails: no pass with nothing compared.
    min_compared: float = 0.5
    # The unquantized model a Q/DQ model was made from (trtpipe/validate/float_model.py): the anchor of the
    # verdict's criterion (trtpipe/validate/anchored.py; without it, the QDQ model without its activations' rounding),
    # and the reference and each candidate are compared against it, so the report says what quantization
    # costs and what FP16 adds. Checked before any stage; its content (sha256) is part of validate's key.
    float_model: Optional[str] = None


@dataclass
class TrtpipeConfig:
    model: ModelConfig = field(default_factory=ModelConfig)
    stages: List[str] = field(default_factory=lambda: ["sanitize", "upgrade_opset", "precision", "build", "validate"])
    cache: CacheConfig = field(default_factory=CacheConfig)
    run: RunConfig = field(default_factory=RunConfig)
    sanitize: SanitizeConfig = field(default_factory=SanitizeConfig)
    upgrade_opset: UpgradeOpsetConfig = field(default_factory=UpgradeOpsetConfig)
    precision: PrecisionConfig = field(default_factory=PrecisionConfig)
    promote_outputs: PromoteOutputsConfig = field(default_factory=PromoteOutputsConfig)
    build: BuildConfig = field(default_factory=BuildConfig)
    validate: ValidateConfig = field(default_factory=ValidateConfig)
    data: DataConfig = field(default_factory=DataConfig)
    # Print full tracebacks for errors (also enabled by TRTPIPE_DEBUG=1).
    debug: bool = False
