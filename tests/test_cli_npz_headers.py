"""An .npz whose array headers declare more than the file holds, or a shape the model does not
take (issue 32, item 13), through the real command line. Before: a 252-byte file declaring
3.6 TiB for a model taking [1, 8, 32] was "out of memory ... raise ulimit" (NumPy allocates what
the header says before reading); it is a corrupt or wrong file, and is now said to be one."""

from __future__ import annotations

import io
import zipfile

import numpy as np
import pytest

from tests.cli_helpers import run_trtpipe


def npz_with_header(path, name: str, shape: tuple[int, ...], data: bytes = b"\0" * 16):
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(header, {"descr": "<f4", "fortran_order": False, "shape": shape})
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr(f"{name}.npy", header.getvalue() + data)
    return path


@pytest.mark.parametrize("name, shape, expected", [
    ("x", (1, 10 ** 12), "input 'x' in data.path {path} declares shape [1, 1000000000000] (float32, 3.6 TiB) in "
                         "its header, the model expects [1, 8, 32]: a wrong or corrupt file"),
    ("x", (1, 8, 32), "data.path {path} is corrupt or truncated: its array 'x' declares shape [1, 8, 32] "
                      "(float32, 1.0 KiB) in its header but holds 16 bytes of data"),
    ("y", (10 ** 12,), "data.path {path} is corrupt or truncated: its array 'y' declares shape [1000000000000] "
                       "(float32, 3.6 TiB)"),
])
def test_a_header_declaring_more_than_the_file_or_the_model_is_a_corrupt_file(tmp_path, name, shape, expected):
    data = npz_with_header(tmp_path / "inputs.npz", name, shape)
    assert data.stat().st_size < 400
    run = run_trtpipe(tmp_path, "model.builtin=mixed_precision", "stages=[sanitize,precision]",
                      f"data.path={data}", timeout=120)
    assert run.code == 2, run.stderr
    errors = [line for line in run.stderr.splitlines() if line.startswith("trtpipe: error")]
    assert len(errors) == 1 and expected.format(path=data) in errors[0], run.stderr
    assert "memory" not in run.stderr and "ulimit" not in run.stderr, run.stderr
