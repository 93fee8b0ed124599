"""The bytes a stage reads of the user's model are the bytes its cache key names.

The source's digest is taken when the run starts (it is part of every key); a stage reads
the file later. A model replaced or rewritten in between (an export still writing, a
`cp` over it, a sweep's other job) made sanitize store model B's graph under model A's
key, and every later run of A got B from the cache (issue 22, item 3).

Decisions:
- A stage that reads the source reads a private snapshot: the model file and each external
  data file it names (the names read from the copied model, not from the original) are
  copied into one of the cache's marked temporaries (`cache_dir.Temporary`: deleted when the
  stage ends, or by the next run if this one dies), and the copy is hashed the way the key's
  digest was taken (`hashing.artifact_digest`). A different digest is refused (exit 2, nothing
  cached): the model changed while trtpipe read it. The stage then reads only the snapshot,
  whose bytes nobody else can change.
- Copying, not hashing the original a second time after the stage: a file that changes and
  changes back between the two hashes would pass, and the stage's lazy reads (weights stay
  on disk until they are written out) would still see whichever bytes were there. The copy
  is a reflink where the file system offers one (no extra disk, instant), else a kernel copy.
- The copy opens each data file one folder at a time with O_NOFOLLOW and checks the open
  descriptor (`external_files.open_beneath`): a link, FIFO, device or hard link swapped in
  after the start's checks (a folder too) is refused here. Permission bits are kept (item 8: a 0600 model's
  snapshot and everything derived from it stay unreadable to others).
- Only a run of the stage snapshots: a cached run reads nothing of the source but its digest.
- The sample data file (`data.path`) is the same case: its digest is taken when the run starts
  and is part of the keys of the stages that run the model, which read it later. A stage that
  uses the data reads a private copy checked against that digest (`data_snapshot`); a
  `data.path` that is a link is followed (it was resolved at the start, a link to a valid
  file is legitimate), but the resolved file swapped for a link afterwards is refused.
- A data folder (`data.path` naming a folder of `.npz` input sets) is copied file by file into
  one private folder, each file checked against its digest in the block's `files`; a link in
  the folder is followed as `data.path` is (resolved once, then opened without following).
- A list of `.npz` files and folders as `data.path` (issue 30, item 5) is copied the same way into
  one private folder, each file named `<position>_<name>` so that the folder's name order is the
  list's order: the stage reads it as a data folder, and its errors name the user's files.
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Iterator, Mapping
from pathlib import Path

from trtpipe.cache.cache_dir import Temporary
from trtpipe.cache.files import copy_fd, disk_errors_as_user_errors
from trtpipe.cache.hashing import artifact_digest, sha256_file
from trtpipe.errors import UserError
from trtpipe.onnxmodel.external_files import checked_data_file, open_beneath, open_checked


@contextlib.contextmanager
def source_snapshot(source: Path, expected_sha256: str, tmp_root: Path) -> Iterator[Path]:
    """A private copy of `source` (and its external data) whose digest is `expected_sha256`."""
    source = Path(source)
    with _snapshot(source, expected_sha256, tmp_root, "model", source.suffix == ".onnx") as target:
        yield target


@contextlib.contextmanager
def data_snapshot(data: Mapping, tmp_root: Path) -> Iterator[Mapping]:
    """The resolved data block (trtpipe.data.resolved_data) with its file, if any, replaced by a
    private copy whose digest is the one taken at the start (and in the stage's key)."""
    if not data.get("path"):
        yield data
        return
    if isinstance(data["path"], (list, tuple)):
        copies = {f"{position:05d}_{Path(file).name}": (Path(file), digest)
                  for position, (file, digest) in enumerate(data["files"].items())}
        with _files_snapshot(copies, tmp_root, "data.path's listed files") as copy:
            yield {**data, "path": str(copy), "files": {name: digest for name, (_, digest) in copies.items()}}
        return
    if data.get("files"):
        folder = Path(data["path"])
        copies = {name: (folder / name, digest) for name, digest in data["files"].items()}
        with _files_snapshot(copies, tmp_root, "the data.path folder's files") as copy:
            yield {**data, "path": str(copy)}
        return
    with _snapshot(Path(data["path"]), data["sha256"], tmp_root, "data.path", onnx_model=False) as copy:
        yield {**data, "path": str(copy)}


@contextlib.contextmanager
def _files_snapshot(copies: Mapping[str, tuple[Path, str]], tmp_root: Path, what: str) -> Iterator[Path]:
    """One private folder holding each source file as its name in `copies`, checked against its digest."""
    with disk_errors_as_user_errors(tmp_root), Temporary(tmp_root) as temporary:
        for name, (source, expected) in copies.items():
            target = temporary.path / name
            _copy_checked(source, target, open_checked(source.resolve(), "this run", hard_links_ok=True,
                                                       what="data.path file"))
            digest = sha256_file(target)
            if digest != expected:
                raise UserError(
                    f"data.path file {source} changed while trtpipe was reading it (sha256 {expected[:12]}… when "
                    f"the run started, {digest[:12]}… now); nothing was cached",
                    f"run again once {what} are no longer being written",
                )
        try:
            yield temporary.path
        except UserError as error:
            def renamed(text: str) -> str:  # the user's files, never the snapshot's
                for name, (source, _) in copies.items():
                    text = text.replace(str(temporary.path / name), str(source))
                return text.replace(str(temporary.path), str(next(iter(copies.values()))[0].parent))

            raise UserError(renamed(error.problem), renamed(error.fix)) from None


@contextlib.contextmanager
def _snapshot(source: Path, expected_sha256: str, tmp_root: Path, what: str, onnx_model: bool) -> Iterator[Path]:
    with disk_errors_as_user_errors(tmp_root), Temporary(tmp_root) as temporary:
        target = temporary.path / source.name
        # The model file may have other names (only external data must not: onnx's rule).
        _copy_checked(source, target, open_checked(source, "this run", hard_links_ok=True, what=f"{what} file"))
        tensors = _external_tensor_names(target) if onnx_model else {}
        for location, tensor_name in tensors.items():
            data_file = checked_data_file(source.parent, location, tensor_name, source)
            copy = target.parent / location
            copy.parent.mkdir(parents=True, exist_ok=True)
            where = f"tensor {tensor_name!r} of model {source}"
            _copy_checked(data_file, copy, open_beneath(source.parent, location, where))
        digest = artifact_digest(target, locations=sorted(tensors)) if onnx_model else sha256_file(target)
        if digest != expected_sha256:
            what_file = "the model file (and its external data)" if onnx_model else f"the {what} file"
            raise UserError(
                f"{what} {source} changed while trtpipe was reading it (sha256 {expected_sha256[:12]}… when the "
                f"run started, {digest[:12]}… now); nothing was cached",
                f"run again once {what_file} is no longer being written",
            )
        try:
            yield target
        except UserError as error:
            # The user's error names the user's files (and a fix that works on them), never the
            # snapshot's, which is gone when the message is read.
            def renamed(text: str) -> str:
                return text.replace(str(target.parent), str(source.parent))

            raise UserError(renamed(error.problem), renamed(error.fix)) from None


def _external_tensor_names(model_path: Path) -> dict[str, str]:
    """location -> the first tensor naming it, read from the snapshot's own model bytes."""
    import onnx  # heavy; only when a stage runs

    from trtpipe.onnxmodel.model_parts import all_tensors

    names: dict[str, str] = {}
    for tensor in all_tensors(onnx.load(str(model_path), load_external_data=False)):
        if tensor.data_location == onnx.TensorProto.EXTERNAL:
            for entry in tensor.external_data:
                if entry.key == "location":
                    names.setdefault(entry.value, tensor.name)
    return names


def _copy_checked(source: Path, target: Path, source_fd: int) -> None:
    """Copy the open, checked `source_fd` (closed here) to the new file `target`, keeping its permission bits."""
    try:
        mode = stat.S_IMODE(os.fstat(source_fd).st_mode) | stat.S_IRUSR | stat.S_IWUSR
        target_fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            copy_fd(source_fd, target_fd)
            os.fchmod(target_fd, mode)
        finally:
            os.close(target_fd)
    finally:
        os.close(source_fd)
