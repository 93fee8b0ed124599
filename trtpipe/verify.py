"""`trtpipe-verify RUN_DIR_OR_MANIFEST`: rebuild a recorded run and prove (or refute)
that the same model and config give the same artifacts.

The manifest holds the resolved config and, per stage, the key material (stage,
version, config, input digests, tool versions). The pipeline is re-run from that
config into a fresh run directory with a fresh cache (or `--use-cache`), and each
stage's key and output digests are compared with the recorded ones. A stage is
`identical`, or `drifted` with the reason: the changed input digest, config value or
tool version, named by comparing the recorded and the new key material.

Before anything is rebuilt, the recorded run must be one that can be compared (issue 32):
its manifest records every stage its config asks for, and each file it names in the run
directory has its recorded sha256 (runner/manifest_trust.py); otherwise exit 2, one line.
After the rebuild, its outcome must be the recorded one too: each stage's status (`ran`
and `cached` are the same outcome) and the run's status and exit code. A manifest whose
validate was edited from `failed` to `ran` is drifted, never `identical`.

Decision: the rebuild (its run directory and fresh cache) lives in a temporary
directory that is removed when the verdict is known, whatever the verdict or error;
`--keep` keeps it and prints where, for a look at a drifted stage's files.

Exit codes: 0 identical, 1 drift, 2 a bad or incomplete manifest, a run directory whose
files are not the recorded ones, or a missing model.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import shutil
import sys
import tempfile
from pathlib import Path

from trtpipe.errors import EXIT_FAILED, EXIT_OK, EXIT_USER_ERROR, UserError


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="trtpipe-verify", description=__doc__.split("\n\n")[0])
    parser.add_argument("manifest", help="a run directory or its manifest.json")
    parser.add_argument("--model", help="the model file, when it moved since the recorded run")
    parser.add_argument("--use-cache", action="store_true", help="verify against the recorded cache directory")
    parser.add_argument("--json", action="store_true", help="print the verdict as JSON")
    parser.add_argument("--keep", action="store_true",
                        help="keep the rebuild's temporary directory (removed by default) and print where it is")
    args = parser.parse_args(argv)
    try:
        verdict = verify(Path(args.manifest), model=args.model, use_cache=args.use_cache, keep=args.keep)
    except UserError as error:
        print(f"trtpipe-verify: error: {error}", file=sys.stderr)
        sys.exit(EXIT_USER_ERROR)
    for warning in verdict["warnings"]:
        print(f"trtpipe-verify: note: {warning}", file=sys.stderr)
    if args.json:
        print(json.dumps(verdict))
    else:
        for stage in verdict["stages"]:
            print(f"  {stage['name']:15} {stage['verdict']:10} {stage['reason'] or ''}")
        if verdict["outcome"]["verdict"] != "identical":
            print(f"  {'run':15} {verdict['outcome']['verdict']:10} {verdict['outcome']['reason']}")
        if not verdict["identical"]:  # what the rebuild warned of may explain the drift
            for line in verdict["rebuild_said"]:
                print(f"trtpipe-verify: the rebuild said: {line}", file=sys.stderr)
        where = f"rebuilt in {verdict['run_dir']}" if verdict["run_dir"] else "rebuild removed (--keep keeps it)"
        what = "identical" if verdict["identical"] else "DRIFTED"
        if verdict["identical"] and verdict["failed_in_both"]:
            what = (f"identical: the rebuild reproduces the recorded run, including its failed "
                    f"{', '.join(verdict['failed_in_both'])} (the run's verdict, not verify's)")
        print(f"trtpipe-verify: {what}; {where}")
    sys.exit(EXIT_OK if verdict["identical"] else EXIT_FAILED)


def verify(manifest_path: Path, *, model: str | None = None, use_cache: bool = False, keep: bool = False) -> dict:
    """Rebuild the recorded run in a fresh directory and compare it stage by stage.

    The verdict's `run_dir` is the rebuild's run directory with `keep`, else None (removed).

    Decision: nothing depends on the current directory: the model is the recorded
    absolute path (or `--model`, resolved here), and the recorded config's relative
    paths resolve against the run's recorded start directory (manifest_read).
    """
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    from trtpipe.api import PipelineFailed, execute
    from trtpipe.config.check import check_config, config_error
    from trtpipe.config.schema import TrtpipeConfig
    from trtpipe.config.store import register_configs
    from trtpipe.cache.hashing import artifact_digest
    from trtpipe.runner.manifest import MANIFEST_NAME
    from trtpipe.runner.manifest_read import as_literal_config, literal, read_manifest, recorded_start_dir
    from trtpipe.runner.manifest_trust import check_complete, check_outcome, check_run_files
    from trtpipe.runner.pipeline import plan_stages
    from trtpipe.source import checked_user_model

    recorded = read_manifest(manifest_path)
    register_configs()
    config = {k: v for k, v in recorded["config"].items() if k not in ("hydra", "recipe")}
    try:
        cfg = OmegaConf.merge(OmegaConf.structured(TrtpipeConfig), as_literal_config(config))
        # A typed field (a float, an int) holding a recorded `${...}` string fails only when read:
        # read every value now, so it is the one-line config error (found by bench/fuzz/fuzz.py).
        OmegaConf.to_container(cfg, resolve=True)
    except OmegaConfBaseException as error:
        raise config_error(error) from None
    check_config(cfg)  # every config problem is found before the rebuild starts
    manifest_file = manifest_path / MANIFEST_NAME if manifest_path.is_dir() else manifest_path
    check_complete(recorded, [stage.name for stage in plan_stages(list(cfg.stages))], manifest_file)
    check_outcome(recorded, manifest_file)
    absent_note = check_run_files(recorded, manifest_file.parent)
    start_dir, start_note = recorded_start_dir(recorded)
    warnings = [note for note in (start_note, absent_note) if note]
    source = recorded["source"]
    notes = []
    if source.get("builtin") is None:
        path = Path(model).resolve() if model else Path(source["path"])
        _check_model_path(path, given=bool(model))
        checked_user_model(path)  # its external data files too, before hashing reads them
        if artifact_digest(path) != source["sha256"]:
            notes.append(f"model file {path} differs from the recorded one (sha256 {source['sha256'][:12]}…)")
        cfg.model.path = literal(str(path))
    if use_cache:
        _check_recorded_cache(Path(str(cfg.cache.dir)).expanduser(), Path(start_dir))
    work = Path(tempfile.mkdtemp(prefix="trtpipe-verify-"))
    if not use_cache:
        cfg.cache.dir = literal(str(work / "cache"))
    # Decision: the rebuild never uses cache.remote: downloading the recorded entries would prove
    # nothing, and verify needs no credentials nor boto3. The recorded run's artifacts are checked
    # by their recorded digests wherever they came from (a remote hit was checked before its use).
    cfg.cache.remote = None
    run_dir = work / "run"
    run_dir.mkdir()
    kept = False
    said = _RebuildMessages()
    try:
        try:
            with said.collected():
                result = execute(cfg, run_dir, start_dir, list(recorded.get("overrides", [])))
        except PipelineFailed as failed:
            result = failed.result
        kept = keep
    finally:
        if not kept:  # an error, an interrupt, or a verdict without --keep: leave nothing behind
            shutil.rmtree(work, ignore_errors=True)
    new_stages = {s["name"]: s for s in result.manifest["stages"]}
    stages = [_compare(old, new_stages.get(old["name"])) for old in recorded["stages"]]
    outcome = _compare_outcome(recorded, result.manifest)
    identical = not notes and outcome["verdict"] == "identical" and all(s["verdict"] == "identical" for s in stages)
    return {"identical": identical, "notes": notes, "stages": stages, "outcome": outcome,
            "run_dir": str(run_dir) if keep else None,
            "failed_in_both": [s["name"] for s in stages if s["verdict"] == "identical" and s.get("status") == "failed"],
            "rebuild_said": said.lines,
            "start_dir": str(start_dir), "warnings": warnings,
            "environment": _environment_changes(recorded, result.manifest)}


def _check_model_path(path: Path, *, given: bool) -> None:
    """A model path that is not a file says what it is (issue 32, item 14): "does not exist"
    only for a path that does not exist, the Fix the option verify reads."""
    import stat

    from trtpipe.onnxmodel.external_files import file_kind

    what = "the model given with --model" if given else "the recorded model"
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        if path.is_symlink():
            raise UserError(f"{what} {path} is a symbolic link to nothing", "give the model file with --model PATH")
        raise UserError(f"{what} {path} does not exist", "give its new location with --model PATH") from None
    except OSError as error:
        raise UserError(f"{what} {path} cannot be read ({error.strerror})",
                        "give the model file with --model PATH") from None
    if not stat.S_ISREG(mode):
        raise UserError(f"{what} {path} is {file_kind(mode)}, not a file", "give the ONNX model file with --model PATH")


class _RebuildMessages:
    """The rebuild's warnings and errors (a failed validation's line among them), kept for the
    verdict instead of going to stderr unattributed between verify's own lines."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    @contextlib.contextmanager
    def collected(self):
        logger = logging.getLogger("trtpipe")
        handler = logging.Handler(logging.WARNING)
        handler.emit = lambda record: self.lines.append(record.getMessage())
        saved = logger.propagate
        logger.addHandler(handler)
        logger.propagate = False
        try:
            yield
        finally:
            logger.removeHandler(handler)
            logger.propagate = saved


def _check_recorded_cache(cache_dir: Path, start_dir: Path) -> None:
    """--use-cache: the recorded cache must be writable; the fix names what verify reads.

    Decision (issue 22, item 16): the cache's own message suggested `cache.dir`/`TRTPIPE_CACHE`,
    which trtpipe-verify does not read (it uses the manifest's recorded cache.dir)."""
    from trtpipe.cache.files import ensure_writable_dir

    cache_dir = cache_dir if cache_dir.is_absolute() else start_dir / cache_dir
    ensure_writable_dir(cache_dir, "the recorded cache directory (--use-cache)",
                        "run trtpipe-verify without --use-cache (it rebuilds in a fresh cache), "
                        f"or make {cache_dir} a writable folder")


def _compare_outcome(old: dict, new: dict) -> dict:
    """The run's status and exit code, as recorded and as rebuilt (a key the manifest lacks is not compared)."""
    keys = [key for key in ("status", "exit_code") if key in old]
    recorded, rebuilt = {k: old[k] for k in keys}, {k: new.get(k) for k in keys}
    if recorded == rebuilt:
        return {"verdict": "identical", "reason": None, "recorded": recorded, "rebuild": rebuilt}
    said = "; ".join(f"{k}: recorded {json.dumps(recorded[k])}, rebuild {json.dumps(rebuilt[k])}" for k in keys
                     if recorded[k] != rebuilt[k])
    return {"verdict": "drifted", "reason": said, "recorded": recorded, "rebuild": rebuilt}


def _outcome(status) -> str:
    """`ran` and `cached` are one outcome: a rebuild with a fresh cache runs what the run found cached."""
    return "done" if status in ("ran", "cached") else status


def _compare(old: dict, new: dict | None) -> dict:
    """Key, key material and output digests must all agree.

    Decision: the material is compared too, not only its hash: a manifest edited by
    hand (a faked tool version) keeps its old key, and only the material shows it.
    """
    from trtpipe.cache.explain import changed_paths, importance
    from trtpipe.cache.key_shape import in_current_shape, key_of, reshaped_key_matches

    name = old["name"]
    if new is None:
        return {"name": name, "verdict": "drifted", "reason": "the stage did not run in the rebuild"}
    recorded = old.get("material") or {}
    current = in_current_shape(recorded)  # a manifest written before the key dropped unread settings
    changes = changed_paths(current, new.get("material") or {})
    reshaped = reshaped_key_matches(old.get("key"), recorded, current, new.get("key"))
    honest = not recorded or key_of(recorded) == old.get("key")
    same_outcome = _outcome(old.get("status")) == _outcome(new.get("status"))
    if ((old.get("key") == new.get("key") and honest) or reshaped) and not changes and _digests(old) == _digests(new):
        if not same_outcome:  # the same work with another outcome: the record was edited (issue 32, item 2)
            failure = (new.get("error") or "").splitlines()[0:1]
            return {"name": name, "verdict": "drifted", "status": new.get("status"),
                    "reason": f"same outputs, another outcome: recorded {old.get('status')}, rebuild "
                              f"{new.get('status')}" + (f" ({failure[0]})" if failure else "")}
        dropped = [path for path, _, after in changed_paths(recorded, current) if after is None]
        note = (f"recorded key also held settings this stage does not read ({', '.join(dropped[:3])}); "
                "same outputs") if reshaped else None
        if old.get("status") == "failed" and new.get("status") == "failed":
            # Identical means reproduced: the same outputs and the same failure (issue 24, item 7).
            failure = (old.get("error") or old.get("summary") or "").splitlines()[0:1]
            note = "; ".join([n for n in (note, "failed in the recorded run and in the rebuild alike"
                                          + (f": {failure[0]}" if failure else "")) if n])
        return {"name": name, "verdict": "identical", "reason": note, "status": new.get("status")}
    if changes:
        changes.sort(key=importance)
        shown = "; ".join(f"{path}: {json.dumps(a)} -> {json.dumps(b)}" for path, a, b in changes[:3])
        more = f" (+{len(changes) - 3} more)" if len(changes) > 3 else ""
        return {"name": name, "verdict": "drifted", "reason": shown + more}
    if not honest:
        return {"name": name, "verdict": "drifted",
                "reason": "the recorded key is not the hash of the recorded material (the manifest was edited)"}
    if old.get("key") != new.get("key"):
        return {"name": name, "verdict": "drifted", "reason": "key changed, and the manifest records no material"}
    differing = [kind for kind in _digests(old) if _digests(old)[kind] != _digests(new).get(kind)]
    return {"name": name, "verdict": "drifted",
            "reason": f"same key, different outputs {differing}: the stage is not deterministic"}


def _digests(stage: dict) -> dict:
    return {kind: output["sha256"] for kind, output in (stage.get("outputs") or {}).items()}


def _environment_changes(old: dict, new: dict) -> dict:
    keys = ("trtpipe", "python", "platform")
    changes = {k: [old.get(k), new.get(k)] for k in keys if old.get(k) != new.get(k)}
    for tool in sorted(set(old.get("tools", {})) | set(new.get("tools", {}))):
        if old.get("tools", {}).get(tool) != new.get("tools", {}).get(tool):
            changes[f"tools.{tool}"] = [old.get("tools", {}).get(tool), new.get("tools", {}).get(tool)]
    return changes
