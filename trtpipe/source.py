"""The pipeline's first artifact: the user's ONNX file, or a built-in example model."""

from __future__ import annotations

import logging
from pathlib import Path

from trtpipe.errors import UserError
from trtpipe.cache.files import cache_errors_as_user_errors, write_atomic
from trtpipe.cache.hashing import sha256_bytes, sha256_file
from trtpipe.cache.tools import distribution_version

log = logging.getLogger(__name__)


def resolve_model_source(path: str | None, builtin: str, cache_root: Path, start_dir: Path) -> Path:
    if path:
        return checked_user_model(Path(path).expanduser() if Path(path).is_absolute() else start_dir / path)
    return _builtin_model_file(builtin, cache_root)


def checked_user_model(path: Path) -> Path:
    """Cheap checks before any stage runs, so a bad path fails in one line with nothing written.

    Every external data file is checked here too (`onnxmodel.external_files`: a regular file
    inside the model's folder, not a link, one name, offsets and lengths that fit), without
    reading the weights: the digest and the stages then read only files that passed."""
    from trtpipe.onnxmodel.onnx_io import load_model

    path = path.resolve()
    load_model(path, weights_on_disk=True)  # raises UserError: missing, empty, corrupt, not ONNX, bad external data
    return path


def _builtin_model_file(name: str, cache_root: Path) -> Path:
    """Generate the built-in model once per generator version, atomically, in the cache.

    Decision: the cache is not trusted blindly: the model's sha256 is recorded next to it
    (model.onnx.sha256) when generated and checked on every use (the models are small);
    a model that does not match, or has no digest on record (older caches), is regenerated,
    with a warning when a digest was on record.
    """
    from trtpipe.models import BUILTIN_MODEL_VERSION

    onnx_version = distribution_version("onnx")
    target = cache_root / "builtin" / f"{name}-v{BUILTIN_MODEL_VERSION}-onnx{onnx_version}" / "model.onnx"
    record = target.with_name(target.name + ".sha256")
    for folder in (target.parent.parent, target.parent):  # only real folders inside the cache
        if folder.is_symlink():
            log.warning("%s in the cache is a symbolic link: removed, the model is generated in the cache", folder)
            folder.unlink()
    if _verified(target, record):
        return target
    from filelock import FileLock  # generating only: a cached run verifies the file and goes on

    from trtpipe.models import builtin_model

    model = builtin_model(name)  # raises UserError for an unknown name
    # A full disk or a file-size limit here is the user's to fix, in one line (it was exit 1,
    # "internal error", found when the accuracy picture stopped being the first large write).
    with cache_errors_as_user_errors(target, "built-in model"):
        target.parent.mkdir(parents=True, exist_ok=True)
        with FileLock(str(target.parent / ".generate.lock"), timeout=60):
            if _verified(target, record):  # another process regenerated it meanwhile
                return target
            if record.is_file():
                log.warning("built-in model %s in the cache does not match its recorded sha256: regenerating", target)
            data = model.SerializeToString()
            record.unlink(missing_ok=True)
            write_atomic(target, data)
            write_atomic(record, sha256_bytes(data).encode())
    log.debug("generated built-in model %s at %s", name, target)
    return target


def _verified(target: Path, record: Path) -> bool:
    try:
        if target.is_symlink() or record.is_symlink():
            return False
        return sha256_file(target) == record.read_text().strip()
    except (OSError, UnicodeDecodeError):
        return False
