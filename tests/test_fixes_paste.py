"""Every "Fix:" works when pasted (issue 14, item 6), or is listed here as prose with the reason.

The fixes are found in the source (tests/fix_catalogue.py: each `UserError(problem, fix)`
and each literal "Fix:" text), keyed by file, function and problem template. Each key is
either a row of PASTE, run through the real command line: the row provokes the error,
the printed Fix is pasted as a shell splits it (its quoted words, or its `key=value`
words) and the run must get past that error; or a row of PROSE, saying why the Fix
cannot be pasted. `test_every_fix_is_in_the_table` fails on a fix in neither, so a new
fix must be added to the table (and, where it can, be made pasteable).

Pasting: words are appended to the command line (a later override wins, `~key`
removes one); a row with `replace=True` replaces the word the Fix names first (the
override as typed) by the second (`Fix: replace 'recipe=fp32' with '+recipe=fp32'`).
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass

import onnx
import pytest

from tests.cli_helpers import run_trtpipe
from tests.fix_catalogue import collected_fixes
from tests.test_cli_dynamic_inputs import small_model, token_model
from tests.test_cli_fp32_baseline import loop_carrying_fp16
from tests.test_cli_integer_ranges import unread_integer_model

# Why a Fix is prose: each row names one of these.
CHOICE = "the Fix lists the valid values or the closest names; which one is meant only the user knows"
USER_VALUE = "the Fix asks for a value only the user knows (a range, a size, a shape, a regex, a type)"
MODEL = "the model file itself must change (re-export it, restore its data file, add a value_info)"
DATA_FILE = "the sample-input file named by data.path must be written or rewritten"
RECIPE_FILE = "a recipe YAML file must be edited"
ENVIRONMENT = "the file system or the installation must change (permissions, free space, a folder, a reinstall)"
TENSORRT = "needs TensorRT or an engine built on a GPU (neither exists on this machine)"
INTERNAL = "a contract between trtpipe's own functions; no configuration reaches it from the command line"
API_ONLY = "raised by the Python API (trtpipe.api.run) only, never by the command line"
VERIFY = "a trtpipe-verify error: its Fix names a command-line option or a manifest to produce"
CACHE_CMD = ("a trtpipe-cache error: its Fix names trtpipe-cache's own command line or the cache folder "
             "(tests/test_cache_manage.py runs them)")
LIVE_HOLDER = ("another process is computing the same entry and still holds its lock: the Fix is to wait for it "
               "or stop it (cache.lock_timeout=N only waits longer; provoking it needs a second live process)")
INSPECT = "a trtpipe-inspect error: the Fix asks for the path of an ONNX file, which only the user knows"
REDUCE = ("a trtpipe-reduce error: its Fix names trtpipe-reduce's own command line (another --output, a failed "
          "run's directory) or trtpipe-verify (tests/reduce/test_reduce_command.py runs them)")
GENERIC = ("the last resort for an error Hydra reports in its own words, after every specific message "
           "(the exact override with +, a misspelled key) was tried")

NO_BUILD = "stages=[sanitize,upgrade_opset,precision]"


@dataclass(frozen=True)
class Paste:
    argv: tuple[str, ...]
    replace: bool = False  # the Fix's first word is the override it replaces by its second


# `{tokens}`: an int64 [batch, seq] model; `{dynamic}`: a float [-1, 3, 8, 8] model (tests/test_cli_dynamic_inputs.py);
# `{loop16}`: a Loop carrying FP16 state (tests/test_cli_fp32_baseline.py); `{unread}`: two int64
# [batch, 4] inputs whose ranges the model does not state (tests/test_cli_integer_ranges.py).
PASTE = {
    "trtpipe/precision/plan/baseline.py:refuse_unless_fp32: precision.default=fp32 (baseline) cannot compute {} "
    "node '{}' in FP32: it still {} {} tensor '{}' because {}{}":
        Paste(("+recipe=fp32", "model.path={loop16}")),
    "trtpipe/cache/manage.py:parse_size: {} {} is not a size (units K, M, G, T, Ki, Mi, Gi, Ti)":
        Paste(("stages=[sanitize]", "cache.max_size=12X")),
    "trtpipe/config/append_hint.py:append_hint: config key '{}' is a new entry: a key the config does not have yet "
    "is added with a leading ++ (or +)":
        Paste(("stages=[sanitize]", "data.inputs.x={low:0,high:2,dtype:int64}"), replace=True),
    "trtpipe/config/append_hint.py:append_hint: config: '{}' selects nothing: '{}' is not in the defaults list, "
    "so it is added with a leading + (+{}=...)":
        Paste(("recipe=fp32", "stages=[sanitize]"), replace=True),
    "trtpipe/config/check.py:_check_input_specs: data.sequence_length is {}, not a length":
        Paste(("stages=[sanitize]", "data.sequence_length=0")),
    "trtpipe/config/check.py:_key_error: config key '{}' is not a trtpipe setting":
        Paste(("stages=[sanitize]", "sanitize.fold_constans=false"), replace=True),
    "trtpipe/config/stage_order.py:check_stage_order: 'stages' lists '{}' after '{}', an order that cannot work ({})":
        Paste(("stages=[sanitize,precision,upgrade_opset]",)),
    "trtpipe/precision/auto/evidence_groups.py:group_decisions: precision.auto.protect={} is not one of {}":
        Paste((NO_BUILD, "precision.auto.protect=sometimes")),
    "trtpipe/cache/remote/location.py:parse_remote: cache.remote is {}, not an s3://BUCKET/PREFIX address":
        Paste(("stages=[sanitize]", "cache.remote=http://bucket/prefix")),
    "trtpipe/cache/remote/location.py:parse_remote: cache.remote names the bucket {}, which is not an S3 bucket name":
        Paste(("stages=[sanitize]", "cache.remote=s3://Not_A_Bucket/ci")),
    "trtpipe/cache/remote/location.py:parse_remote: cache.remote's prefix {} has an empty, '.' or '..' part":
        Paste(("stages=[sanitize]", "cache.remote=s3://bucket/ci/../x")),
    "trtpipe/runner/pipeline.py:plan_stages: 'stages' lists a stage twice: {}":
        Paste(("stages=[sanitize,sanitize]",)),
    "trtpipe/config/tolerance_check.py:check_tolerance: {}.{} is {}: {}":
        Paste(("stages=[sanitize]", "validate.tolerance.cosine_min=1.5")),
    "trtpipe/config/check.py:_check_tolerances: validate.min_compared is {}, not a share of positions between 0 and 1":
        Paste(("stages=[sanitize]", "validate.min_compared=1.5")),
    "trtpipe/numerics/inputs.py:_integer_ranges_needed: integer model inputs have no sample range "
    "(data.inputs.<name>.low/high) and the model states none (no constant table they index, no mask use): {}; "
    "random values of ids, masks or indices would be meaningless":
        Paste(("model.path={unread}", NO_BUILD)),
    "trtpipe/data.py:_refuse_unsized_inputs: {} that nothing sizes, so there is no sample to draw":
        Paste(("model.path={dynamic}", NO_BUILD)),
    "trtpipe/numerics/inputs.py:_shape: data.inputs.{}.shape {} does not fit the model's shape {}":
        Paste(("model.path={dynamic}", NO_BUILD, "++data.inputs.x.shape=[1,3,9]")),
    "trtpipe/trt/profiles.py:checked_profiles: the model has dynamic inputs ({}) and build.profiles is empty "
    "(build.require_profiles=true demands them)":
        Paste(("model.path={dynamic}", "++data.inputs.x.shape=[2,3,8,8]", "build.require_profiles=true")),
    "trtpipe/trt/data_profiles.py:check_data_in_profiles: the sample input {} ({}) has shape {}: dimension {} is {}, "
    "outside build.profiles[{}].{}'s range [{}, {}]{}; the engine could not run it":
        Paste(("model.path={dynamic}", "++data.inputs.x.shape=[4,3,8,8]",
               "build.profiles=[{x:{min:[1,3,8,8],opt:[2,3,8,8],max:[3,3,8,8]}}]")),
    "trtpipe/numerics/inputs.py:generate_inputs: data.inputs names {}, which are not inputs of the model "
    "(its inputs: {})":
        Paste((NO_BUILD, "+data.inputs.nope={low:0,high:1}")),
    "trtpipe/numerics/inputs.py:_check_spec_dtype: data.inputs.{}.dtype is {} but the model input is {}":
        Paste(("model.path={dynamic}", NO_BUILD, "++data.inputs.x={shape:[1,3,8,8],dtype:int64}")),
    "trtpipe/config/output_names.py:check_output_names: <problem>":
        Paste(("stages=[sanitize,upgrade_opset,precision,validate]", "validate.plot=false",
               "+validate.outputs.last_hidden={cosine_min:0.99}")),
    "trtpipe/config/ignored_settings.py:ignored_settings_lines: trtpipe: warning: {} set but ignored: stage '{}' "
    "is not in 'stages'. Fix: to run it, add it to 'stages': {}":
        Paste(("stages=[sanitize]", "upgrade_opset.target=18")),
    "trtpipe/precision/network/rules.py:resolve_rules: <message>":
        Paste((NO_BUILD, "+precision.rules.typo={match:op_type,pattern:SoftMax}")),
    "trtpipe/config/check.py:_unknown_recipe: there is no recipe '{}' (the closest is '{}')":
        Paste(("+recipe=transformer_fp61", "stages=[sanitize]"), replace=True),
    "trtpipe/graph/sanitize.py:_growth_rule: sanitize.fold_growth_limit={} / sanitize.fold_growth_floor_bytes={}: "
    "the limit must be a number >= 1 and the floor a byte count >= 0":
        Paste(("stages=[sanitize]", "sanitize.fold_growth_limit=0.5")),
    "trtpipe/validate/float_model.py:checked_float_model: {}: {}":
        Paste(("stages=[sanitize,validate]", "validate.float_model=missing.onnx")),
    "trtpipe/validate/float_model.py:checked_float_model: {} {} is not the unquantized form of the model: {}":
        Paste(("stages=[sanitize,validate]", "validate.float_model={tokens}")),
    "trtpipe/config/schema.py:repair_settings: precision.repair is {}, neither true/false nor a mapping such as "
    "{max_trials: 80}":
        Paste(("stages=[sanitize]", "precision.repair=sometimes")),
    "trtpipe/config/schema.py:repair_settings: precision.repair.{} is {}, {}":
        Paste(("stages=[sanitize]", "precision.repair.max_trials=1")),
    "trtpipe/search/repair.py:repair_note: ; Fix: widen the budget: precision.repair.max_trials={} "
    "precision.repair.max_seconds={}":
        Paste(("+recipe=naive_fp16", "stages=[sanitize,upgrade_opset,precision,validate]",
               "precision.repair.enabled=true", "precision.repair.max_trials=2")),
    "trtpipe/config/check.py:_one_of: config value of '{}' is {}":
        Paste(("stages=[sanitize]", "precision.default=fp61")),
    "trtpipe/config/build_schema.py:checked_choice: build.{} is {}":
        Paste((NO_BUILD[:-1] + ",build]", "build.on_missing=eror")),
    "trtpipe/config/build_schema.py:checked_rtx_target: build.rtx.target_sm is {}, not an RTX architecture "
    "TensorRT-RTX builds for":
        Paste(("stages=[sanitize]", "build.rtx.target_sm=sm90")),
    "trtpipe/trt/rtx/options.py:provider_options: {} is strongly typed only; build.precision_mode={} is TensorRT "
    "10.x's":
        Paste((NO_BUILD[:-1] + ",build]", "build.backend=tensorrt_rtx", "build.precision_mode=constraints")),
    "trtpipe/trt/rtx/options.py:provider_options: build.{}={} has no TensorRT-RTX EP option ({})":
        Paste((NO_BUILD[:-1] + ",build]", "build.backend=tensorrt_rtx", "build.tf32=true")),
    "trtpipe/graph/promote.py:_check_choice: promote_outputs.{} is {}":
        Paste((NO_BUILD[:-1] + ",promote_outputs]", "promote_outputs.tensors=[nope]", "promote_outputs.match=regx")),
}

PROSE = {
    "trtpipe/config/check.py:_missing_launcher: hydra/launcher={}: Hydra's {} launcher plugin is not installed":
        ENVIRONMENT,
    "trtpipe/numerics/inputs.py:_check_declared: input {} in data.path {} has shape {}, the model expects {}": DATA_FILE,
    "trtpipe/numerics/inputs.py:_check_declared: input {} in data.path {} declares shape {} ({}, {}) in its header, "
    "the model expects {}: a wrong or corrupt file (nothing was loaded)": DATA_FILE,
    "trtpipe/numerics/inputs.py:_check_declared: data.path {} is corrupt or truncated: its array {} declares shape {} "
    "({}, {}) in its header but holds {} of data (nothing was loaded)": DATA_FILE,
    "trtpipe/cache/manage.py:permission_denied: cannot {} the cache {}: {} is {}'s and its permissions keep you "
    "out ({}){}": CACHE_CMD,
    # tests/cache_remote/test_remote_command.py provokes it (a boto3 that cannot be imported).
    "trtpipe/cache/remote/s3_store.py:check_boto3: cache.remote is set, but boto3 (the S3 client the remote cache uses) "
    "is not installed": ENVIRONMENT,
    "trtpipe/runner/rundir.py:start_directory: the current directory no longer exists (it was deleted after the "
    "shell entered it); trtpipe takes relative paths, its run directory and Hydra's records from it": ENVIRONMENT,
    "trtpipe/cache/manage.py:parse_age: {} {} is not an age (units s, m, h, d, w)": CACHE_CMD,
    "trtpipe/cache/manage.py:open_cache: {} is not a trtpipe cache (no {}, or a linked or damaged layout); "
    "trtpipe-cache manages only trtpipe's own caches": CACHE_CMD,
    "trtpipe/cache_cli.py:_prune: prune needs a bound": CACHE_CMD,
    "trtpipe/cache/files.py:cache_errors_as_user_errors: cannot use the cache's {} {}: {}": ENVIRONMENT,
    "trtpipe/cache/locks.py:_acquire: {}waited {} s for {}, {} (lock {}); that process is still running (a lock is "
    "released when its holder exits, so it is never stale). Fix: let it finish, or stop it, then rerun (the rerun "
    "uses its result), or wait longer: cache.lock_timeout={}": LIVE_HOLDER,
    "trtpipe/numerics/ort_session.py:_failure: ONNX Runtime {} ran out of memory to {} the model: {}": ENVIRONMENT,
    "trtpipe/numerics/sample_values.py:check_generation_specs: data.inputs.{}.shape {} has a dimension of size 0: "
    "nothing would be run or compared": USER_VALUE,
    "trtpipe/numerics/sample_values.py:check_generation_specs: data.inputs.{}.{} is {}: every generated value would "
    "be inf/NaN": USER_VALUE,
    "trtpipe/numerics/sample_values.py:check_sample_values: {} holds {} inf/NaN value(s) of {}: the reference would "
    "be inf/NaN where they reach, and those positions cannot be compared": DATA_FILE,
    "trtpipe/numerics/sample_values.py:check_sample_values: {} is empty (shape {}): nothing would be run or compared":
        DATA_FILE,
    'trtpipe/api.py:_refuse_hydra_overrides: override {}: {} is a Hydra setting the Python API does not use': API_ONLY,
    'trtpipe/config/build_schema.py:_bytes: {} is {}': USER_VALUE,
    "trtpipe/config/schema.py:repair_settings: precision.repair has no key {}; valid keys under 'precision.repair' "
    "are: {}": CHOICE,
    'trtpipe/trt/rtx/options.py:provider_options: {} builds one optimization profile, build.profiles has {}':
        USER_VALUE,
    'trtpipe/config/build_schema.py:check_optimization_level: build.builder_optimization_level is {}': CHOICE,
    'trtpipe/config/build_schema.py:check_plugins: build.plugins is {}': USER_VALUE,
    'trtpipe/config/build_schema.py:memory_pool_bytes: build.memory_pool_limits names the pool {}': CHOICE,
    'trtpipe/config/check.py:_check_input_specs: {} is not a valid input spec: {}': USER_VALUE,
    'trtpipe/config/check.py:_check_input_specs: {} is {}, not an input spec': USER_VALUE,
    "trtpipe/config/check.py:_key_error: config key '{}' is a new entry of '{}'": GENERIC,
    "trtpipe/config/check.py:_key_error: config value of '{}' is invalid: {}": USER_VALUE,
    'trtpipe/config/check.py:_config_error: config: {}': GENERIC,
    'trtpipe/config/check.py:config_error: recipe file {}: {}': RECIPE_FILE,
    "trtpipe/config/locate.py:_shipped_dir: trtpipe's '{}' directory was not found next to or inside {}": ENVIRONMENT,
    "trtpipe/config/locate.py:recipe_dirs: {} names '{}', which is not a directory": ENVIRONMENT,
    "trtpipe/config/locate.py:load_recipe: recipe {} does not start with '{}'": RECIPE_FILE,
    'trtpipe/config/locate.py:load_recipe: recipe {} is not valid YAML ({})': RECIPE_FILE,
    'trtpipe/config/locate.py:load_recipe: recipe {} cannot be read ({})': RECIPE_FILE,
    'trtpipe/config/tolerance_check.py:check_tolerance: {} is {}, not a tolerance': USER_VALUE,
    'trtpipe/config/tolerance_check.py:check_tolerance: {}.{} is not a tolerance key': CHOICE,
    'trtpipe/config/tolerance_check.py:check_tolerance: {}.{} is {}, not a number': USER_VALUE,
    'trtpipe/config/tolerance_check.py:check_tolerances: {}.outputs is {}, not a mapping of output names to tolerances': USER_VALUE,
    "trtpipe/graph/names/bounded_regex.py:_flags_in_child: {}: regex {} did not finish matching {} names within {} s (catastrophic backtracking, e.g. nested quantifiers such as '(a+)+')": USER_VALUE,
    "trtpipe/graph/onnx_gs/gs_bridge.py:refuse_unexportable_io: {} has {} input/output {}, which onnx-graphsurgeon {} (sanitize's cleanup and constant folding, LayerNorm fusion) cannot write": MODEL,
    'trtpipe/onnxmodel/json_metadata.py:read_json_metadata: model metadata {} is not a JSON object': MODEL,
    'trtpipe/cache/cache.py:_refuse_private_entry: cache entry {} is not readable for you: another user made it from a model only they may read': ENVIRONMENT,
    'trtpipe/cache/cache_dir.py:_check_marker: the cache marker {} cannot be read ({}): the cache belongs to another user, or its permissions keep you out': ENVIRONMENT,
    "trtpipe/cache/cache_dir.py:_refuse: the cache's {} ({}) is {}; trtpipe writes and deletes only real files and folders inside its cache (link the whole cache.dir instead)": ENVIRONMENT,
    'trtpipe/data.py:resolved_data: data.path {} {}': DATA_FILE,
    "trtpipe/numerics/input_ranges.py:check_table_indices: sample input {} in {} (set {}) holds {}, outside the model's table: {} are {}, so valid values are 0 to {}": DATA_FILE,
    'trtpipe/data.py:_folder_digests: {} {} is a folder with no .npz file in it': DATA_FILE,
    'trtpipe/data.py:_list_digests: data.path entry {} is not an .npz file': DATA_FILE,
    'trtpipe/data.py:_list_digests: data.path entry {} repeats the input set {}, already reached by an earlier entry':
        USER_VALUE,
    'trtpipe/data.py:_list_digests: data.path entry {} {}': DATA_FILE,
    'trtpipe/data.py:_list_digests: data.path is an empty list': USER_VALUE,
    'trtpipe/config/check.py:_check_data_path: data.path is {}, not a path or a list of paths': USER_VALUE,
    'trtpipe/numerics/inputs.py:load_inputs: data.path {} is a folder with no .npz file in it': DATA_FILE,
    'trtpipe/runner/source_snapshot.py:_files_snapshot: data.path file {} changed while trtpipe was reading it (sha256 {}… when the run started, {}… now); nothing was cached': ENVIRONMENT,
    # A stage's own error about a data folder's set, its snapshot paths renamed to the user's: that error's row.
    'trtpipe/runner/source_snapshot.py:_files_snapshot: <renamed(error.problem)>': DATA_FILE,
    'trtpipe/onnxmodel/external_files.py:checked_data_file: external data file {} of {} cannot be read ({})': MODEL,
    'trtpipe/onnxmodel/external_files.py:checked_data_file: external data file {} of {} does not exist': MODEL,
    'trtpipe/onnxmodel/external_files.py:checked_data_file: external data file {} of {} does not exist ({} is not a folder)': MODEL,
    "trtpipe/onnxmodel/external_files.py:checked_data_file: external data file {} of {} resolves outside the model's directory ({})": MODEL,
    "trtpipe/onnxmodel/external_files.py:checked_data_file: external data file {} of {} {} (to {}); trtpipe reads external data only from regular files inside the model's directory, as onnx and ONNX Runtime do": MODEL,
    'trtpipe/onnxmodel/external_files.py:checked_data_file: {} keeps its data externally but names no file (empty location)': MODEL,
    "trtpipe/onnxmodel/external_files.py:checked_data_file: {} names the model's folder ({}) as its external data file, not a file in it": MODEL,
    "trtpipe/config/check.py:_unknown_recipe: there is no recipe '{}'": CHOICE,
    "trtpipe/onnxmodel/external_files.py:checked_data_file: {} names external data at {}, outside the model's directory (ONNX requires a relative path below it, without '..')": MODEL,
    'trtpipe/onnxmodel/external_files.py:checked_data_file: {} names the model file itself ({}) as its external data file': MODEL,
    'trtpipe/onnxmodel/external_files.py:checked_span: external data file {} of {} is too short for it (needs bytes {}-{}, has {})': MODEL,
    'trtpipe/onnxmodel/external_files.py:checked_span: {} declares {} bytes of external data, but its dims and type take {}': MODEL,
    'trtpipe/onnxmodel/external_files.py:checked_span: {} has a negative external-data {} ({})': MODEL,
    'trtpipe/onnxmodel/external_files.py:checked_span: {} has the external-data {} {}, not a whole number': MODEL,
    'trtpipe/onnxmodel/external_files.py:open_beneath: external data file {} of {} cannot be opened ({}; a symbolic link is refused)': MODEL,
    'trtpipe/onnxmodel/external_files.py:open_checked: {} {} of {} cannot be opened ({}; a symbolic link is refused)': MODEL,
    'trtpipe/onnxmodel/external_files.py:refuse_unreadable_kind: {} {} of {} is a hard link (the file has {} names); trtpipe, onnx and ONNX Runtime read external data only from files with one name': MODEL,
    'trtpipe/onnxmodel/external_files.py:refuse_unreadable_kind: {} {} of {} is {}, not a regular file': MODEL,
    'trtpipe/onnxmodel/onnx_io.py:_load_external_data: external data file {} of model {} ended while tensor {} was read (truncated meanwhile?)': MODEL,
    'trtpipe/runner/source_snapshot.py:_snapshot: {} {} changed while trtpipe was reading it (sha256 {}… when the run started, {}… now); nothing was cached': ENVIRONMENT,
    # A stage's own error about the source, its snapshot paths renamed to the user's: the fix is that error's row.
    'trtpipe/runner/source_snapshot.py:_snapshot: <renamed(error.problem)>': MODEL,
    'trtpipe/onnxmodel/onnx_io.py:_check_readable_file: model file {} does not exist': MODEL,
    'trtpipe/onnxmodel/onnx_io.py:_check_readable_file: model file {} is empty': MODEL,
    'trtpipe/onnxmodel/onnx_io.py:_check_readable_file: model file {} is not a file': MODEL,
    'trtpipe/onnxmodel/onnx_io.py:_check_readable_file: model file {} is not readable': MODEL,
    'trtpipe/onnxmodel/onnx_io.py:load_model: model file {} is not a valid ONNX protobuf (truncated or corrupt: {})': MODEL,
    'trtpipe/onnxmodel/onnx_io.py:load_model: model file {} is not an ONNX model (it has no graph, outputs or opset)': MODEL,
    'trtpipe/graph/passes/opset.py:_conversion_error: cannot convert {} from opset {} to {} ({})': MODEL,
    'trtpipe/graph/passes/opset.py:_conversion_error: op {} has no schema in ONNX {} (an experimental or removed op, or a custom op without its own domain), so it cannot be converted from opset {} to {}': MODEL,
    "trtpipe/graph/passes/opset.py:_refuse_changed_interface: converting from opset {} to {} changes graph input/output {} (shape {} -> {}, at {}); the converted model would not accept the original's inputs": MODEL,
    'trtpipe/graph/promote.py:_compile: promote_outputs: pattern {} is not a valid regular expression ({})': USER_VALUE,
    'trtpipe/graph/promote.py:_expose: promote_outputs: the type of tensor {} (output of {} node {}) is unknown to ONNX shape inference, and a graph output needs one': MODEL,
    'trtpipe/graph/promote.py:_match_tensors: promote_outputs: tensor {} is {}, not computed by the model, so it cannot be promoted': CHOICE,
    'trtpipe/graph/promote.py:_raise_unmatched: promote_outputs: {} pattern {} ({}) matches no {}': CHOICE,
    'trtpipe/graph/sanitize.py:_refuse_invalid_source: model {} is not a valid ONNX graph (onnx.checker on that file: {}{})': MODEL,
    'trtpipe/models/__init__.py:builtin_model: there is no built-in model named {}': CHOICE,
    'trtpipe/numerics/input_types.py:as_declared: input {} in {} is {}, the model expects {}': DATA_FILE,
    'trtpipe/numerics/input_types.py:declared_dtype: model input {} has element type {} ({}), which has no NumPy equivalent': MODEL,
    'trtpipe/numerics/input_types.py:declared_dtype: model input {} is {}, not a tensor; sample inputs (data.inputs, or .npz / Polygraphy JSON in data.path) are tensors': MODEL,
    'trtpipe/numerics/inputs.py:_check_feeds: input {} in {} has shape {}, the model expects {}': DATA_FILE,
    'trtpipe/numerics/inputs.py:_check_feeds: {} has arrays {} that are not model inputs ({})': DATA_FILE,
    'trtpipe/numerics/inputs.py:_check_feeds: {} has no values for model inputs {}': DATA_FILE,
    'trtpipe/numerics/inputs.py:_check_spec_dtype: data.inputs.{}.dtype {} is not a NumPy dtype': CHOICE,
    'trtpipe/numerics/inputs.py:_draw_plan: model input {} is a string tensor; strings cannot be generated': DATA_FILE,
    'trtpipe/numerics/inputs.py:_range: data.inputs.{} has low {} >= high {}': USER_VALUE,
    'trtpipe/numerics/inputs.py:_range: data.inputs.{} needs both low and high': USER_VALUE,
    'trtpipe/numerics/inputs.py:_read_npz: data.path {} is not a readable .npz file ({})': DATA_FILE,
    'trtpipe/numerics/inputs.py:_read_polygraphy_json: data.path {} does not hold a list of {input name: array} dicts': DATA_FILE,
    'trtpipe/numerics/inputs.py:_read_polygraphy_json: data.path {} is not a Polygraphy JSON inputs file ({})': DATA_FILE,
    'trtpipe/numerics/inputs.py:generate_inputs: data.seed {} is out of range': USER_VALUE,
    'trtpipe/numerics/inputs.py:generate_inputs: {} validation iterations requested': USER_VALUE,
    'trtpipe/numerics/inputs.py:load_inputs: data.path {} does not exist or is not a file': DATA_FILE,
    'trtpipe/numerics/inputs.py:load_inputs: data.path {} is neither .npz nor .json': DATA_FILE,
    'trtpipe/numerics/ort_session.py:_failure: ONNX Runtime {} cannot {} the model: {}': MODEL,
    'trtpipe/numerics/ort_session.py:_prepared: no sample values for model inputs {}': DATA_FILE,
    'trtpipe/numerics/ort_session.py:_prepared: sample input {} is {} but the model expects {}': DATA_FILE,
    'trtpipe/numerics/ort_session.py:_prepared: sample inputs {} are not inputs of the model (its inputs: {})': DATA_FILE,
    'trtpipe/numerics/ort_session.py:_session: ONNX Runtime cannot run this model: op {} is not registered (a custom op?)': MODEL,
    "trtpipe/numerics/refusals.py:refuse_bf16_before_opset_13: node {} produces a bf16 tensor but the model's opset is {}; bf16 Casts need opset 13 or newer": INTERNAL,
    'trtpipe/numerics/refusals.py:refuse_custom_low_precision: node {} ({}::{}) uses low-precision tensors {}; the emulation cannot run a custom op on FP32 stand-ins': MODEL,
    'trtpipe/numerics/refusals.py:refuse_low_precision_tensor_attributes: node {} ({}) has a low-precision tensor attribute {} the emulation does not know how to convert': MODEL,
    'trtpipe/numerics/refusals.py:refuse_sparse_attribute: node {} holds a sparse {} value, which the emulation does not convert': MODEL,
    'trtpipe/numerics/refusals.py:refuse_sparse_initializers: sparse initializer {} is {}, which the emulation does not convert': MODEL,
    'trtpipe/numerics/refusals.py:refuse_unsupported_types: the candidate model has {} {} tensor(s) ({}{}) that are not QuantizeLinear outputs or DequantizeLinear inputs, which the FP16/BF16 emulation cannot reproduce': MODEL,
    'trtpipe/precision/materialize/materialize.py:_check_plan: bf16 needs opset {} or later, the model imports opset {}': INTERNAL,
    'trtpipe/precision/materialize/materialize.py:_check_plan: the precision plan has no precision for {} node(s): {}': INTERNAL,
    'trtpipe/precision/materialize/materialize.py:_check_plan: the precision plan names {} node(s) the model does not have: {}': INTERNAL,
    'trtpipe/precision/materialize/materialize.py:_check_plan: unknown precision(s) {} in the precision plan': INTERNAL,
    'trtpipe/precision/plan/planner.py:_check_effective: <message>': CHOICE,
    "trtpipe/precision/network/rules.py:compile_rules: config key '{}.{}' is not a rule field": CHOICE,
    'trtpipe/precision/network/rules.py:compile_rules: {} is {}, not a rule': USER_VALUE,
    'trtpipe/precision/network/rules.py:compile_rules: {}.match is {}': CHOICE,
    'trtpipe/precision/network/rules.py:compile_rules: {}.optional is {}': CHOICE,
    'trtpipe/precision/network/rules.py:compile_rules: {}.pattern is empty': USER_VALUE,
    'trtpipe/precision/network/rules.py:compile_rules: {}.pattern {} is not a valid regular expression ({})': USER_VALUE,
    'trtpipe/precision/network/rules.py:compile_rules: {}.precision is {}': CHOICE,
    'trtpipe/precision/materialize/weights.py:float32_values: weight {} is still in an external data file and cannot be converted': INTERNAL,
    "trtpipe/cache/cache_dir.py:_check_marker: cache {} has format {}, newer than this trtpipe's ({})": ENVIRONMENT,
    'trtpipe/cache/cache_dir.py:_check_marker: {} is not a trtpipe cache marker': ENVIRONMENT,
    'trtpipe/cache/cache_dir.py:claim_cache_dir: cache directory {} is not empty and is not a trtpipe cache (no {})': ENVIRONMENT,
    "trtpipe/cache/cache_dir.py:claim_cache_dir: the cache's {}/ ({}) is a symbolic link; trtpipe writes and cleans only real folders inside its cache (link the whole cache.dir instead)": ENVIRONMENT,
    'trtpipe/cache/files.py:disk_errors_as_user_errors: cannot write to {}: {}': ENVIRONMENT,
    'trtpipe/cache/files.py:ensure_writable_dir: {} {} is not writable ({})': ENVIRONMENT,
    "trtpipe/runner/manifest_read.py:as_literal_config: the manifest's config cannot be read as plain data": VERIFY,
    'trtpipe/runner/manifest_read.py:read_manifest: cannot read manifest {} ({})': VERIFY,
    'trtpipe/runner/manifest_read.py:read_manifest: {} is not a trtpipe manifest ({})': VERIFY,
    "trtpipe/runner/pipeline.py:plan_stages: stage '{}' needs {}, which no earlier stage produces": INTERNAL,
    'trtpipe/runner/rundir.py:run_dir_error: cannot write the run directory: {}: {}': ENVIRONMENT,
    'trtpipe/search/fp32_set.py:search_fp32_set: low_precision is {}': INTERNAL,
    'trtpipe/search/fp32_set.py:search_fp32_set: max_trials is {}': INTERNAL,
    "trtpipe/search/fp32_set.py:split_plan: the precision decisions do not match the model's nodes ({} node(s) without a decision)": CHOICE,
    "trtpipe/stages/__init__.py:stage_class: 'stages' lists '{}', which is not a trtpipe stage": CHOICE,
    'trtpipe/stages/build.py:deferred_outcome: build: no {} can be built here: {} (build.on_missing=error demands one). '
    'Fix: {}': TENSORRT,
    'trtpipe/stages/build.py:run: <constraints_unavailable(environment.tensorrt)>': TENSORRT,
    'trtpipe/trt/builder.py:_pool: build.memory_pool_limits names the pool {}': TENSORRT,
    'trtpipe/trt/builder.py:build_engine: <constraints_unavailable(trt.__version__)>': TENSORRT,
    "trtpipe/trt/inspect/inspector_json.py:parse_engine_information: the engine inspector output has no 'Layers' list": TENSORRT,
    'trtpipe/trt/inspect/inspector_json.py:parse_engine_information: the engine inspector output is not JSON ({})': TENSORRT,
    "trtpipe/trt/inspect/inspector_json.py:parse_engine_information: the engine's layer information has names only, no types": TENSORRT,
    "trtpipe/trt/parser/parser_check.py:check_parser_support: TensorRT {}'s ONNX parser cannot import {} op(s) of this model: {}{}": MODEL,
    "trtpipe/trt/parser/parser_check.py:check_parser_support: {} builder cannot build {} op(s) of this model: {}: {}": MODEL,
    'trtpipe/trt/parser/parser_ops.py:list_for: build.tensorrt_version is {}, not a version number': USER_VALUE,
    'trtpipe/trt/profiles.py:_checked_spec: {} must have exactly the keys min, opt, max': USER_VALUE,
    'trtpipe/trt/profiles.py:_checked_spec: {}.{} has rank {}, the input has rank {} {}': USER_VALUE,
    'trtpipe/trt/profiles.py:_checked_spec: {}.{} is {}, not a list of non-negative integers': USER_VALUE,
    'trtpipe/trt/profiles.py:_checked_spec: {}.{}[{}] is {}, but that dimension is fixed at {} {}': USER_VALUE,
    'trtpipe/trt/profiles.py:_checked_spec: {}: dimension {} has min {}, opt {}, max {}': USER_VALUE,
    'trtpipe/trt/profiles.py:checked_profiles: {} is not a mapping of input name -> {min, opt, max}': USER_VALUE,
    'trtpipe/trt/profiles.py:opt_shapes: {} is not a mapping of input name -> {min, opt, max}': USER_VALUE,
    'trtpipe/trt/profiles.py:opt_shapes: {}.{} has no opt shape (a list of sizes)': USER_VALUE,
    'trtpipe/config/output_names.py:check_output_names: {} is {}, not a mapping of output names to tolerances': USER_VALUE,
    'trtpipe/trt/profiles.py:checked_profiles: {} lacks the dynamic input(s) {}': USER_VALUE,
    'trtpipe/trt/profiles.py:_refuse_unknown_inputs: {} names {}, which are not inputs of the model (its inputs: {})': USER_VALUE,
    'trtpipe/trt/runner.py:run_all: input shapes {} fit no optimization profile of the engine ({})': TENSORRT,
    'trtpipe/trt/runner.py:run_all: the engine needs the input(s) {}, which the sample inputs lack': TENSORRT,
    'trtpipe/trt/seam.py:message: {}. Fix: {}': TENSORRT,
    'trtpipe/validate/compare.py:from_mapping: unknown tolerance key(s) {} in {}': CHOICE,
    'trtpipe/inspect_model/command.py:_load: <error.problem>': INSPECT,
    'trtpipe/reduce/command.py:reduce_run: {} already exists and is not an empty folder': REDUCE,
    'trtpipe/reduce/failing_run.py:read_failing_run: {} is not a trtpipe run directory (no manifest.json in it)': REDUCE,
    'trtpipe/reduce/failing_run.py:read_failing_run: run {} has no validation report to reduce (its validate stage '
    'did not run)': REDUCE,
    'trtpipe/reduce/failing_run.py:read_failing_run: run {} did not fail validation on the emulated candidate: '
    'nothing to reduce': REDUCE,
    'trtpipe/reduce/failing_run.py:read_failing_run: run {}: no output of the emulated candidate breaks a bound when '
    'run again here': REDUCE,
    'trtpipe/reduce/failing_run.py:_path_of_digest: run {} lacks the model file its validate stage read (sha256 {}…), '
    'in its folder and in its recorded cache': REDUCE,
    'trtpipe/verify.py:_check_model_path: {} {} does not exist': VERIFY,
    'trtpipe/verify.py:_check_model_path: {} {} cannot be read ({})': VERIFY,
    'trtpipe/verify.py:_check_model_path: {} {} is a symbolic link to nothing': VERIFY,
    'trtpipe/verify.py:_check_model_path: {} {} is {}, not a file': VERIFY,
    # issue 32: a manifest or run directory verify cannot trust; its Fix is a manifest to produce.
    'trtpipe/runner/manifest_trust.py:check_complete: manifest {} is incomplete or edited: {}': VERIFY,
    'trtpipe/runner/manifest_trust.py:check_outcome: manifest {} is incomplete or edited: {}': VERIFY,
    # Backstops since session 11: an input without a size is refused before any stage
    # (trtpipe/data.py `_refuse_unsized_inputs`), and the build needs the precision stage, which uses data.
    "trtpipe/numerics/inputs.py:_shape: model input {} has dynamic dimensions (shape {}), so there is no size to draw":
        INTERNAL,
    "trtpipe/trt/profiles.py:checked_profiles: the model has dynamic inputs ({}), build.profiles is empty and the "
    "sample data gives no shape for them": INTERNAL,
    'trtpipe/runner/manifest_trust.py:check_run_files: run directory {} cannot be trusted: {} is not the file its '
    'manifest records (sha256 {}…, recorded {}…)': VERIFY,
    'trtpipe/runner/manifest_trust.py:_inside_parts: run directory {} cannot be trusted: its manifest names the '
    'file {}, which is not a path inside the run directory': VERIFY,
    'trtpipe/runner/manifest_trust.py:_digest_beneath: run directory {} cannot be trusted: {} is missing': VERIFY,
    'trtpipe/runner/manifest_trust.py:_digest_beneath: run directory {} cannot be trusted: {} is not a file next '
    'to it': VERIFY,
    'trtpipe/runner/manifest_trust.py:_locations: run directory {} cannot be trusted: {} cannot be read as ONNX '
    '({})': VERIFY,
    'trtpipe/runner/manifest_trust.py:_open_beneath: run directory {} cannot be read ({})': VERIFY,
    'trtpipe/runner/manifest_trust.py:_open_beneath: run directory {} cannot be trusted: {} cannot be opened as '
    'the file the run wrote ({}; a symbolic link is refused)': VERIFY,
    'trtpipe/runner/manifest_trust.py:_open_beneath: run directory {} cannot be trusted: {} is {}, not the file '
    'the run wrote': VERIFY,
}


def test_every_fix_is_in_the_table():
    found = set(collected_fixes())
    assert not set(PASTE) & set(PROSE), "a fix is both pasted and prose"
    assert sorted(found - set(PASTE) - set(PROSE)) == [], "new fixes: add a PASTE row (or a PROSE row with the reason)"
    assert sorted(set(PASTE) - found) == [] and sorted(set(PROSE) - found) == [], "rows of fixes that no longer exist"


def test_the_prose_fixes_are_exactly_those_not_pasted():
    assert set(PROSE) == set(collected_fixes()) - set(PASTE)


def problem_pattern(key: str) -> re.Pattern:
    """The printed problem of a key: its template with each `{}` matching anything (a problem
    passed as a variable matches any problem)."""
    text = key.split(": ", 1)[1]
    if text.startswith("<"):
        return re.compile(".")
    return re.compile(".*?".join(re.escape(part) for part in text.split("{}")))


def fix_words(line: str) -> list[str]:
    """What a user pastes from the Fix: its quoted words, else its `key=value` words."""
    fix = line.split("Fix:", 1)[1].strip().rstrip(".")
    quoted = re.findall(r"'[^']*'|\"[^\"]*\"", fix)
    if quoted:
        return [word for text in quoted for word in shlex.split(text)]
    return [word for word in fix.split() if re.fullmatch(r"(\+{1,2}|~)?[A-Za-z_][\w.]*=\S+", word)]


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    directory = tmp_path_factory.mktemp("fixes")
    onnx.save(token_model(), str(directory / "tokens.onnx"))
    onnx.save(small_model(-1), str(directory / "dynamic.onnx"))
    onnx.save(loop_carrying_fp16(), str(directory / "loop16.onnx"))
    onnx.save(unread_integer_model(dynamic=True), str(directory / "unread.onnx"))
    return directory


@pytest.mark.parametrize("key", list(PASTE), ids=[f"{key.split(':')[1]}-{index}" for index, key in enumerate(PASTE)])
def test_the_fix_works_when_pasted(workdir, key):
    row = PASTE[key]
    argv = [arg.replace("{tokens}", str(workdir / "tokens.onnx")).replace("{dynamic}", str(workdir / "dynamic.onnx"))
            .replace("{loop16}", str(workdir / "loop16.onnx")).replace("{unread}", str(workdir / "unread.onnx"))
            for arg in row.argv]
    pattern = problem_pattern(key)
    name = re.sub(r"\W+", "_", key.split(": ", 1)[0])
    first = run_trtpipe(workdir, *argv, cache=workdir / "cache", run_name=name)
    lines = [line for line in (first.stdout + first.stderr).splitlines() if "Fix:" in line and pattern.search(line)]
    assert len(lines) == 1, f"the row does not provoke exactly one such fix: {first.stdout + first.stderr}"
    words = fix_words(lines[0])
    assert words, f"nothing to paste in: {lines[0]}"
    if row.replace:
        assert words[0] in argv, f"the Fix names an override that was not typed: {lines[0]}"
        pasted = [arg for arg in argv if arg != words[0]] + words[1:2]
    else:
        pasted = argv + words
    second = run_trtpipe(workdir, *pasted, cache=workdir / "cache", run_name=name + "_pasted")
    output = second.stdout + second.stderr
    problem = lines[0].split("Fix:", 1)[0].strip()
    again = [line for line in output.splitlines()
             if "Fix:" in line and pattern.search(line) and (pattern.pattern != "." or problem in line)]
    assert again == [], f"pasting {words} did not get past the error: {output}"
    assert second.code in (0, 1, 2), output
