"""Run the configured stages in order through the cache and write the manifest."""

from __future__ import annotations

import contextlib
import logging
import time
import traceback
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from trtpipe import __version__
from trtpipe.errors import EXIT_OK, OutOfMemory, StageFailed, TrtpipeError, UserError, is_out_of_memory
from trtpipe.data import TABLES_KEY, check_sample_data, model_ranges, resolved_data
from trtpipe.cache.cache import ArtifactCache
from trtpipe.cache.cache_home import note_old_cache
from trtpipe.cache.digest_memo import memoised_digest
from trtpipe.cache.manage import human_size
from trtpipe.cache.remote.tier import remote_tier
from trtpipe.runner.cache_bound import bound_cache
from trtpipe.runner.memory import release_memory
from trtpipe.cache.files import disk_errors_as_user_errors, narrow_modes
from trtpipe.runner.console import StageProgress
from trtpipe.runner.run_summary import write_run_summary
from trtpipe.runner.interrupt import Interrupted, raise_if_signalled_since, signals_deferred, signals_received
from trtpipe.runner.source_snapshot import data_snapshot, source_snapshot
from trtpipe.runner.manifest import MANIFEST_NAME, RunManifest, StageRecord
from trtpipe.cache.publish import RunDirPublisher
from trtpipe.runner.output_preflight import check_build_profiles, check_float_model, check_validate_outputs
from trtpipe.config.stage_order import check_stage_order
from trtpipe.safe_text import safe_text
from trtpipe.cache.tools import tool_versions
from trtpipe.source import resolve_model_source
from trtpipe.stages import stage_class
from trtpipe.stages.base import SOURCE_KIND, Stage

log = logging.getLogger("trtpipe")


@dataclass
class Artifact:
    path: Path
    sha256: str
    # name -> sha256 of the files of the cache entry holding the artifact (empty for the source).
    entry_files: Mapping[str, str] = field(default_factory=dict)
    # The user's model (or the built-in one): a stage reads a snapshot of it (source_snapshot.py).
    is_source: bool = False


@dataclass
class PipelineResult:
    run_dir: Path
    manifest: RunManifest
    exit_code: int
    error: TrtpipeError | None = None


def plan_stages(names: list[str]) -> list[type[Stage]]:
    """Resolve stage names and check each stage's inputs are produced before it."""
    if len(set(names)) != len(names):
        raise UserError(f"'stages' lists a stage twice: {names}",
                        f"list each stage once: 'stages=[{','.join(dict.fromkeys(names))}]'")
    stages = [stage_class(name) for name in names]
    check_stage_order(names)
    available = {SOURCE_KIND}
    for stage in stages:
        missing = [kind for kind in stage.consumes if kind not in available]
        if missing:
            raise UserError(
                f"stage '{stage.name}' needs {missing}, which no earlier stage produces",
                "reorder 'stages' or add the stage that produces it",
            )
        available.update(stage.produces)
    return stages


def run_pipeline(cfg: DictConfig, run_dir: Path, start_dir: Path, overrides: list[str]) -> PipelineResult:
    """Raises UserError for problems found before any stage starts (nothing is written then)."""
    stages = plan_stages(list(cfg.stages))
    cache_root = Path(cfg.cache.dir).expanduser()
    cache = ArtifactCache(cache_root if cache_root.is_absolute() else start_dir / cache_root, cfg.cache.lock_timeout,
                          hold_entries=True, remote=remote_tier(cfg.cache.get("remote"), cfg.cache.get("remote_mode")))
    note_old_cache(start_dir, cache.root)
    source_path = resolve_model_source(cfg.model.path, cfg.model.builtin, cache.root, start_dir)
    check_validate_outputs(cfg, [stage.name for stage in stages], source_path)  # exit 2 before any stage
    check_float_model(cfg, [stage.name for stage in stages], source_path, start_dir)  # likewise
    check_build_profiles(cfg, stages, source_path)  # before profile 0's opt shapes size the sample inputs
    source = Artifact(source_path, memoised_digest(source_path, cache.root / "index"), is_source=True)
    manifest = RunManifest(
        config=OmegaConf.to_container(cfg, resolve=True),
        overrides=list(overrides),
        source={"path": str(source.path), "sha256": source.sha256, "builtin": None if cfg.model.path else cfg.model.builtin},
        start_dir=str(Path(start_dir).resolve()),
    )
    # Names on the console (overrides, summaries, errors) are escaped: one line each (safe_text.py).
    log.info("trtpipe: %s -> %s", safe_text(" ".join(overrides)) or "(defaults)", safe_text(run_dir))
    try:
        return _run_stages(cfg, stages, cache, manifest, source, run_dir, start_dir)
    finally:
        cache.release()


def _run_stages(cfg, stages, cache, manifest, source, run_dir, start_dir) -> PipelineResult:
    artifacts = {SOURCE_KIND: source}
    failure: TrtpipeError | None = None
    stop_reason: str | None = None
    publisher = RunDirPublisher(run_dir, cfg.get("run", {}).get("artifacts", "all"))
    copy_error: TrtpipeError | None = None
    current: str | None = None
    try:
        data = resolved_data(OmegaConf.to_container(cfg.data, resolve=True),
                             None if cfg.model.path else cfg.model.builtin, start_dir, _opt_shapes(cfg))
        shapes: dict = {}
        if any(stage.uses_data for stage in stages):
            # ranges of integer inputs read from the model, or one error naming every input without one;
            # remembered per model digest (memo/model_inputs.py)
            data, read, shaped = model_ranges(data, source.path, source.sha256, cache.root / "index",
                                              int(cfg.data.get("sequence_length") or 128))
            for name, found in read.items():
                log.info("  data            input %s: integers in [%d, %d), read from the model: %s",
                         safe_text(repr(name)), found.low, found.high, safe_text(found.reason))
            for name, line in shaped.items():  # dynamic dims sized by the model's other inputs or defaults
                log.info("  data            input %s: shape %s", safe_text(repr(name)), safe_text(line))
        if any(stage.uses_data or stage.uses_data_shapes for stage in stages):
            # empty or inf/NaN samples: exit 2 before any stage (a stage that only takes their shapes
            # does not look at the values)
            shapes = check_sample_data(data, check_values=any(stage.uses_data for stage in stages),
                                       expected=_source_input_dims(source.path) if data.get("path") else None)
            _check_data_in_profiles(cfg, stages, shapes, data)
            data.pop(TABLES_KEY, None)
        for stage in stages:
            if failure is not None or stop_reason is not None:
                reason = stop_reason or "an earlier stage failed"
                manifest.stages.append(StageRecord(stage.name, "skipped", reason=reason))
                log.info("  %-15s skipped  (%s)", stage.name, reason)
                continue
            current = stage.name
            record, failure, stops = _run_stage(stage, cfg, artifacts, cache, publisher, data, shapes, source)
            manifest.stages.append(record)
            current = None
            if stops:
                stop_reason = f"{stage.name} asked to stop here ({record.summary})"
        try:
            left = publisher.finish(succeeded=failure is None)
            manifest.left_in_cache = left
            if left:
                why = "the run failed" if failure is not None else "run.artifacts=final"
                log.info("  not placed in the run directory (%s; in the cache under the keys in %s): %s", why,
                         MANIFEST_NAME, safe_text(", ".join(left)))
        except TrtpipeError as error:
            copy_error, failure = error, failure or error
    except KeyboardInterrupt as error:  # Ctrl-C or SIGTERM (runner/interrupt.py)
        _record_interrupted(manifest, stages, publisher, run_dir, Interrupted.of(error, current))
    manifest.status = "failed" if failure else "ok"
    manifest.exit_code = failure.exit_code if failure else EXIT_OK
    # A full disk: exit 2 with one line naming the path (the copy error is then the same cause).
    with disk_errors_as_user_errors(run_dir / MANIFEST_NAME):
        write_run_summary(run_dir, manifest.write(run_dir))  # the run in Markdown, to paste (run_summary.py)
    if copy_error is not None:
        log.error("  copying into the run directory failed: %s", copy_error)
    bound_cache(cache, cfg.cache.get("max_size"))
    return PipelineResult(run_dir, manifest, manifest.exit_code, failure)


def _record_interrupted(manifest: RunManifest, stages, publisher, run_dir: Path, interrupted: Interrupted) -> None:
    """The running stage `interrupted`, the rest `skipped`, the manifest written; raises `interrupted`."""
    with signals_deferred():
        recorded = {record.name for record in manifest.stages}
        for stage in stages:
            if stage.name == interrupted.stage:
                manifest.stages.append(StageRecord(stage.name, "interrupted", reason=f"signal {interrupted.signum}"))
            elif stage.name not in recorded:
                manifest.stages.append(StageRecord(stage.name, "skipped", reason="the run was interrupted"))
        try:
            # the finished stages' reports complete the run directory; no model (publish.py)
            manifest.left_in_cache = publisher.finish(succeeded=False)
        except TrtpipeError as error:
            log.debug("copying into the run directory failed after the interrupt: %s", error)
        manifest.status, manifest.exit_code = "interrupted", interrupted.exit_code
        try:
            write_run_summary(run_dir, manifest.write(run_dir))
        except OSError as error:
            log.debug("the interrupted run's manifest could not be written: %s", error)
    raise interrupted


def _run_stage(stage, cfg, artifacts, cache, publisher, data, shapes,
               source: Artifact) -> tuple[StageRecord, TrtpipeError | None, bool]:
    """Returns the stage's record, its failure if any, and whether the pipeline stops here.
    `source`: the run's model, which a re-run's reason is explained against (cache/explain.py)."""
    config = OmegaConf.to_container(cfg[stage.name], resolve=True)
    if stage.uses_data:
        config["data"] = data
    if stage.uses_data_shapes:
        config["data_shapes"] = shapes
    inputs = {kind: artifacts[kind] for kind in stage.consumes}
    # Optional inputs (validate's engine): used when an earlier stage produced them.
    inputs.update({kind: artifacts[kind] for kind in stage.optional_consumes if kind in artifacts})
    material = {
        "stage": stage.name,
        "version": stage.version,
        "config": stage.key_config(config),  # only what changes the outputs (Stage.key_config)
        "inputs": {kind: artifact.sha256 for kind, artifact in inputs.items()},
        "tools": tool_versions(stage.tools),
    }
    facts = stage.key_facts(config=config)
    if facts:  # e.g. GPU, driver, CUDA and TensorRT: an engine is never reused across them
        material["environment"] = facts
    places = stage.key_input_places({kind: artifact.path for kind, artifact in inputs.items()})
    if places:
        material["input_places"] = places
    files = stage.key_files(config)
    if files:  # by content; None for a file missing here (a deferred build names the GPU machine's paths)
        material["files"] = {str(path): memoised_digest(path, cache.root / "index") if path.is_file() else None
                             for path in files}
    if stage.uses_cache_dir:  # where shared state lives (timing cache); not part of the key
        config = {**config, "cache_dir": str(cache.root)}
    record = StageRecord(stage.name, "failed", inputs=material["inputs"], material=material)
    started = time.perf_counter()

    def compute(out_dir: Path) -> dict:
        log.info("  %-15s running...", stage.name)
        StageProgress.start(stage.name)  # seconds counted under that line, on a terminal only
        signalled = signals_received()
        try:
            with contextlib.ExitStack() as snapshots:
                paths = {kind: snapshots.enter_context(source_snapshot(a.path, a.sha256, cache.root / "tmp"))
                         if a.is_source and stage.snapshot_source else a.path for kind, a in inputs.items()}
                # The sample data too: the stage reads the bytes its key's digest names.
                run_config = ({**config, "data": snapshots.enter_context(data_snapshot(data, cache.root / "tmp"))}
                              if stage.uses_data else config)
                outcome = stage().run(paths, run_config, out_dir)
                # Permissions follow the inputs (item 8): what is derived from a 0600 model stays 0600.
                narrow_modes(out_dir, [file for kind, a in inputs.items() for file in _files_of(a, paths[kind])])
        finally:
            StageProgress.stop()
            release_memory()
        raise_if_signalled_since(signalled, stage.name)  # a swallowed Ctrl-C never publishes (interrupt.py)
        return {"outputs": outcome.outputs, "summary": outcome.summary, "status": outcome.status,
                "details": outcome.details, "console_file": outcome.console_file, "stop": outcome.stop,
                "failed": outcome.failed,
                "trtpipe": __version__}

    try:
        known_files = {artifact.path.parent / name: digest
                       for artifact in inputs.values() for name, digest in artifact.entry_files.items()}
        result = cache.get_or_compute(stage.name, material, compute, required=stage.produces, known_files=known_files,
                                      source={"path": str(source.path.resolve()), "sha256": source.sha256})
    except TrtpipeError as error:
        record.seconds = round(time.perf_counter() - started, 3)
        record.error = str(error)
        log.error("  %-15s failed  %s", stage.name, safe_text(error))
        return record, error, False
    except Exception as error:  # a defect: keep the traceback in the log file, one line on the console
        record.seconds = round(time.perf_counter() - started, 3)
        if is_out_of_memory(error):  # the machine's limit, not a defect (errors.OutOfMemory)
            log.debug("%s", traceback.format_exc())
            failure = OutOfMemory(f"running stage {stage.name}", error)
            record.error = str(failure)
            log.error("  %-15s failed  %s", stage.name, safe_text(failure))
            return record, failure, False
        record.error = f"{type(error).__name__}: {error}"
        log.debug("%s", traceback.format_exc())
        log.error("  %-15s failed  %s (traceback in %s)", stage.name, safe_text(record.error),
                  publisher.run_dir / "trtpipe.log")
        return record, StageFailed(f"stage {stage.name} failed: {record.error}"), False
    entry = result.entry
    record.key = entry.key
    record.status = "deferred" if entry.record.get("status") == "deferred" else result.status
    record.origin = result.origin
    if result.transfer is not None:
        record.remote = {"downloaded": result.transfer.downloaded, "seconds": round(result.transfer.seconds, 3)}
    elif result.upload is not None:
        record.remote = {"upload": result.upload}
    record.reason = result.reason
    record.summary = entry.record.get("summary", "")
    record.outputs = publisher.publish(entry, stage.name)
    record.seconds = round(time.perf_counter() - started, 3)
    for kind in entry.record["outputs"]:
        artifacts[kind] = Artifact(entry.output_path(kind), entry.output_digest(kind), entry.record["files"])
    why = f"  ({result.reason})" if result.status == "ran" and result.reason else ""
    if result.transfer is not None:  # `cached (remote, 0.8 s, 121.0 MB)`: what the download cost
        seconds = result.transfer.seconds
        log.info("  %-15s %s (remote, %s s, %s)  %s", stage.name, record.status,
                 f"{seconds:.1f}" if seconds >= 0.1 else f"{seconds:.2f}", human_size(result.transfer.downloaded),
                 safe_text(record.summary))
    else:
        log.info("  %-15s %-8s %6.2fs  %s%s", stage.name, record.status, record.seconds, safe_text(record.summary),
                 safe_text(why))
    if entry.record.get("console_file"):
        log.info("%s", (entry.directory / entry.record["console_file"]).read_text().rstrip())
    if entry.record.get("failed"):
        record.status, record.error = "failed", entry.record["failed"]
        log.error("  %-15s failed  %s", stage.name, safe_text(record.error))
        return record, StageFailed(record.error), False
    return record, None, bool(entry.record.get("stop"))


def _files_of(artifact: Artifact, read_from: Path) -> list[Path]:
    """The files a stage reads for one input: its cache entry's, the source snapshot's, or the file."""
    if artifact.entry_files:
        return [artifact.path.parent / name for name in artifact.entry_files]
    if read_from != artifact.path:  # a snapshot: a private folder holding the model and its data files
        return [path for path in read_from.parent.rglob("*") if path.is_file()]
    return [artifact.path]


def _source_input_dims(source_path: Path) -> dict:
    """The source model's inputs -> dims (weights not loaded): an .npz's headers are checked against
    them before its arrays are read (a header declaring terabytes is a wrong file, not a memory limit)."""
    from trtpipe.numerics.inputs import model_inputs
    from trtpipe.onnxmodel import input_dims
    from trtpipe.onnxmodel.onnx_io import load_model

    return {value.name: input_dims.dims(value)
            for value in model_inputs(load_model(source_path, load_external_data=False))}


def _check_data_in_profiles(cfg: DictConfig, stages, shapes: Mapping, data: Mapping) -> None:
    """Sample data outside every given build profile: exit 2 before any stage (also when the build
    is cached). The runner reads both top-level blocks; the build stage reads only its own."""
    build = cfg.get("build")
    if "build" not in [stage.name for stage in stages] or build is None or not build.get("profiles"):
        return
    from trtpipe.data import sample_data_place
    from trtpipe.trt.data_profiles import check_data_in_profiles  # no tensorrt import

    check_data_in_profiles(OmegaConf.to_container(build.profiles, resolve=True), shapes, sample_data_place(data))


def _opt_shapes(cfg: DictConfig) -> dict:
    """The build's first profile's opt shapes (sample inputs of dynamic models default to them)."""
    build = cfg.get("build")
    if build is None or not build.get("profiles"):
        return {}
    from trtpipe.trt.profiles import opt_shapes  # no tensorrt import: plain shape bookkeeping

    return opt_shapes(OmegaConf.to_container(build.profiles, resolve=True))
