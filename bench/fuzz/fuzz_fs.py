"""The `fs` fuzz kind (issue 22, "Done when"): the file system around a real run is mutated —
links, hard links, FIFOs and devices as external-data locations and as `data.path`, corrupt
external-data fields, run directories edited or rerun, a model replaced mid-run, and the
cache layout (bench/fuzz/fuzz_cachefs.py) — and the real command is judged by precise oracles
(bench/fuzz/fuzz_runs.py).

A case is `{"mutation": name, "seed": n}`; mutations are taken in turn (case i gets
MUTATIONS[(i + seed) % len]) so every mutation is tried once per round, and each one draws
its details (tensor count, shared or separate data files, which tensor, stages, sizes, a
warm or cold cache, delays) from a `random.Random` seeded by the case.

Working directory of a case: `model/` (the model folder), `outside/` (secret files, victims,
folders outside the model folder and the cache), `cache/`, `runs/`. Only `cache/` and
`runs/` may change; `model/` and `outside/` are snapshotted before the run.
"""

from __future__ import annotations

import os
import random
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from bench.fuzz import fuzz_models as fm
from bench.fuzz import fuzz_runs as fr


@dataclass
class Context:
    workdir: Path
    rng: random.Random
    model: fm.Model | None = None
    problems: list[str] = field(default_factory=list)

    @property
    def cache(self) -> Path:
        return self.workdir / "cache"

    @property
    def outside(self) -> Path:
        path = self.workdir / "outside"
        path.mkdir(exist_ok=True)
        return path

    def run_dir(self, name: str = "run") -> Path:
        return self.workdir / "runs" / name

    def stages(self) -> str:
        return self.rng.choice(["[sanitize]", "[sanitize]", "[sanitize,upgrade_opset]",
                                "[sanitize,upgrade_opset,precision]"])

    def run(self, *extra: str, name: str = "run", model: Path | None = None, **kwargs) -> fr.Outcome:
        overrides = [f"model.path={model or self.model.path}", f"hydra.run.dir={self.run_dir(name)}", *extra]
        if not any(o.startswith("stages=") for o in extra):
            overrides.append(f"stages={self.stages()}")
        return fr.run_cli(self.workdir, overrides, self.cache, **kwargs)

    def guarded(self) -> dict:
        """State of everything that must not change: all but the cache and the run directories."""
        return fr.tree(self.workdir, (self.cache, self.workdir / "runs"))

    def check(self, *problems: str | None) -> None:
        self.problems.extend(p for p in problems if p)


def _secret(ctx: Context, size: int) -> bytes:
    """Random bytes of `size` in outside/secret.bin: they must never reach the cache or a run directory."""
    data = ctx.rng.randbytes(size)
    (ctx.outside / "secret.bin").write_bytes(data)
    return data


def _refused(ctx: Context, about: Path | None = None, secret: bytes | None = None) -> None:
    """Run the mutated model: a one-line user error, nothing outside changed, no secret copied."""
    before = ctx.guarded()
    outcome = ctx.run()
    ctx.check(fr.user_error(outcome, about), fr.nothing_outside(before, ctx.guarded()), fr.cache_ok(ctx.cache))
    if secret is not None:
        ctx.check(fr.no_secret(secret, [ctx.cache, ctx.workdir / "runs"]))


def _location(ctx: Context) -> tuple[int, Path]:
    index = ctx.rng.randrange(len(ctx.model.locations))
    return index, ctx.model.path.parent / ctx.model.locations[index]


def _replace(path: Path) -> None:
    """Remove a data file (shared files included) so the mutation can take its place."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif os.path.lexists(path):
        path.unlink()


# -- external data locations (items 1, 16) ---------------------------------------------------------

def ext_plain(ctx: Context) -> None:
    """Control: weights in a regular file in a subfolder of the model folder are read."""
    index, _ = _location(ctx)
    sub = ctx.model.path.parent / "data"
    sub.mkdir()
    fields = dict(ctx.model.fields[index])
    shutil.copy(ctx.model.path.parent / fields["location"], sub / "copy.bin")
    fields["location"] = "data/copy.bin"
    fm.rewrite_fields(ctx.model, index, fields)
    before = ctx.guarded()
    ctx.check(fr.success(ctx.run()), fr.nothing_outside(before, ctx.guarded()), fr.cache_ok(ctx.cache))


def _same_layout_secret(ctx: Context, path: Path) -> bytes:
    """A secret file shaped like the data file it replaces (so only the link itself is wrong)."""
    return _secret(ctx, path.stat().st_size)


def ext_symlink_outside(ctx: Context) -> None:
    _, path = _location(ctx)
    secret = _same_layout_secret(ctx, path)
    _replace(path)
    path.symlink_to(ctx.outside / "secret.bin" if ctx.rng.random() < 0.5 else os.path.relpath(
        ctx.outside / "secret.bin", path.parent))
    _refused(ctx, path, secret)


def ext_hardlink_outside(ctx: Context) -> None:
    _, path = _location(ctx)
    secret = _same_layout_secret(ctx, path)
    _replace(path)
    os.link(ctx.outside / "secret.bin", path)
    _refused(ctx, path, secret)


def ext_symlink_inside(ctx: Context) -> None:
    """A location that is a link to another file of the model folder (onnx refuses links)."""
    _, path = _location(ctx)
    real = path.with_name("real-" + path.name)
    path.rename(real)
    path.symlink_to(real.name)
    _refused(ctx, path)


def ext_hardlink_inside(ctx: Context) -> None:
    """A location that is one of two names of a file (issue: refuse a hard link with other names)."""
    _, path = _location(ctx)
    os.link(path, path.with_name("other-" + path.name))
    _refused(ctx, path)


def ext_folder_link(ctx: Context) -> None:
    """The location's folder is a link to a folder outside the model folder."""
    index, path = _location(ctx)
    secret_dir = ctx.outside / "weights"
    secret_dir.mkdir()
    shutil.copy(path, secret_dir / "w.bin")
    secret = ctx.rng.randbytes(path.stat().st_size)
    (secret_dir / "w.bin").write_bytes(secret)
    (ctx.model.path.parent / "linked").symlink_to(secret_dir)
    fm.rewrite_fields(ctx.model, index, {**ctx.model.fields[index], "location": "linked/w.bin"})
    _refused(ctx, ctx.model.path.parent / "linked" / "w.bin", secret)


def ext_fifo(ctx: Context) -> None:
    _, path = _location(ctx)
    _replace(path)
    os.mkfifo(path)
    _refused(ctx, path)


def ext_dev_zero(ctx: Context) -> None:
    _, path = _location(ctx)
    _replace(path)
    path.symlink_to("/dev/zero")
    _refused(ctx, path)


def ext_device(ctx: Context) -> None:
    """A character device node (the one of /dev/zero) in the model folder."""
    _, path = _location(ctx)
    _replace(path)
    try:
        os.mknod(path, 0o644 | 0o020000, os.makedev(1, 5))
    except PermissionError:
        path.symlink_to("/dev/zero")  # no CAP_MKNOD: the link is the closest mutation
    _refused(ctx, path)


def ext_directory(ctx: Context) -> None:
    _, path = _location(ctx)
    _replace(path)
    path.mkdir()
    _refused(ctx, path)


def ext_missing(ctx: Context) -> None:
    _, path = _location(ctx)
    _replace(path)
    _refused(ctx)


# -- external data fields (item 10, 16) ------------------------------------------------------------

def _corrupt(ctx: Context, **changes) -> None:
    index, _ = _location(ctx)
    fields = {**ctx.model.fields[index], **{k: str(v) for k, v in changes.items()}}
    fm.rewrite_fields(ctx.model, index, fields)
    _refused(ctx, ctx.model.path.parent / fields["location"])  # "" and "." name the folder: it exists


def ext_negative_offset(ctx: Context) -> None:
    _corrupt(ctx, offset=-ctx.rng.randint(1, 64))


def ext_negative_length(ctx: Context) -> None:
    _corrupt(ctx, length=-ctx.rng.randint(1, 64))


def ext_short_length(ctx: Context) -> None:
    index, _ = _location(ctx)
    _corrupt(ctx, length=ctx.rng.randint(0, len(ctx.model.weights[index]) - 1))


def ext_past_end(ctx: Context) -> None:
    _, path = _location(ctx)
    _corrupt(ctx, offset=path.stat().st_size + ctx.rng.randint(0, 64))


def ext_not_a_number(ctx: Context) -> None:
    _corrupt(ctx, **{ctx.rng.choice(["offset", "length"]): ctx.rng.choice(["abc", "1.5", "0x10", " "])})


def ext_location_model(ctx: Context) -> None:
    _corrupt(ctx, location="model.onnx", offset=0)


def ext_empty_location(ctx: Context) -> None:
    _corrupt(ctx, location=ctx.rng.choice(["", "."]))


# -- data.path (item 16) ---------------------------------------------------------------------------

def _data_run(ctx: Context, data: Path, legit: bool) -> None:
    before = ctx.guarded()
    outcome = ctx.run(f"data.path={data}", "stages=[sanitize,precision]")
    ctx.check(fr.success(outcome) if legit else fr.user_error(outcome, data if data.exists() or
                                                               data.is_symlink() and data.resolve().exists() else None),
              fr.nothing_outside(before, ctx.guarded()), fr.cache_ok(ctx.cache))


def data_directory(ctx: Context) -> None:
    (ctx.outside / "inputs").mkdir()
    _data_run(ctx, ctx.outside / "inputs", legit=False)


def data_fifo(ctx: Context) -> None:
    os.mkfifo(ctx.outside / "inputs.npz")
    _data_run(ctx, ctx.outside / "inputs.npz", legit=False)


def data_dev_zero(ctx: Context) -> None:
    (ctx.outside / "inputs.npz").symlink_to("/dev/zero")
    _data_run(ctx, ctx.outside / "inputs.npz", legit=False)


def data_link_valid(ctx: Context) -> None:
    """Control: data.path is a link (the user named it) to a valid .npz: it is read."""
    real = fm.sample_data(ctx.outside / "real.npz", ctx.model.width, ctx.rng.randrange(1000))
    (ctx.outside / "inputs.npz").symlink_to(real)
    _data_run(ctx, ctx.outside / "inputs.npz", legit=True)


def data_nonfinite(ctx: Context) -> None:
    """Sample inputs holding NaN or inf (some or all): a user error before the model runs (item 5)."""
    import numpy as np

    array = np.random.default_rng(ctx.rng.randrange(1000)).standard_normal((2, ctx.model.width)).astype(np.float32)
    bad = ctx.rng.choice([np.nan, np.inf, -np.inf])
    if ctx.rng.random() < 0.5:
        array[:] = bad
    else:
        array.flat[ctx.rng.randrange(array.size)] = bad
    np.savez(ctx.outside / "inputs.npz", x=array)
    _data_run(ctx, ctx.outside / "inputs.npz", legit=False)


# -- run directories and the source (items 3, 6, 7, 8) ---------------------------------------------

def rundir_edit(ctx: Context) -> None:
    """An edit of run1's file (when its mode lets the user write) never reaches run2 or the cache."""
    stages = ctx.stages()
    first, second = ctx.run(f"stages={stages}", name="run1"), ctx.run(f"stages={stages}", name="run2")
    ctx.check(fr.success(first), fr.success(second))
    if first.code or second.code:
        return
    edited = ctx.run_dir("run1") / "sanitize" / "model.onnx"
    other = ctx.run_dir("run2") / "sanitize" / "model.onnx"
    kept = other.read_bytes()
    if edited.stat().st_mode & 0o200:
        with open(edited, "r+b") as handle:
            handle.write(b"\x00edited by the user\x00")
    if other.read_bytes() != kept:
        ctx.check("an edit of run1/sanitize/model.onnx changed run2's copy")
    ctx.check(fr.cache_ok(ctx.cache))


def rundir_failed_rerun(ctx: Context) -> None:
    """A rerun into the same folder that ends in a user error keeps the earlier run's files."""
    outcome = ctx.run(name="again")
    ctx.check(fr.success(outcome))
    if outcome.code:
        return
    run_dir = ctx.run_dir("again")
    kept = {p: p.read_bytes() for p in [run_dir / "manifest.json", *sorted((run_dir / ".hydra").glob("*"))]}
    bad = ctx.rng.choice([f"model.path={ctx.workdir / 'missing.onnx'}", "precision.default=fp17",
                          f"data.path={ctx.workdir / 'missing.npz'}"])
    failed = fr.run_cli(ctx.workdir, [f"model.path={ctx.model.path}", f"hydra.run.dir={run_dir}", bad],
                        ctx.cache)
    ctx.check(fr.user_error(failed))
    changed = [p.name for p, data in kept.items() if not p.exists() or p.read_bytes() != data]
    if changed:
        ctx.check(f"a failed rerun ({bad}) changed the earlier run's {changed}")


def perms_private(ctx: Context) -> None:
    """Weights from a 0600 file never land group- or world-readable in the cache or a run directory."""
    for path in ctx.model.path.parent.iterdir():
        path.chmod(0o600)
    outcome = ctx.run()
    ctx.check(fr.success(outcome))
    weights = ctx.model.weights[0]
    for root in (ctx.cache, ctx.workdir / "runs"):
        for path in fr.regular_files(root):
            if path.stat().st_mode & 0o077 and weights in path.read_bytes():
                ctx.check(f"{path.relative_to(ctx.workdir)} holds the 0600 weights with mode "
                          f"{oct(path.stat().st_mode & 0o777)}")
                return


def model_swap(ctx: Context) -> None:
    """Model A is replaced by B at a random moment of a run (or A and B alternate every 50 ms):
    a run's output is the graph its manifest's digest names, and B's graph is never served for A."""
    import hashlib
    import json

    folder = ctx.workdir / "model"
    seed = ctx.rng.randrange(2**31)
    a = fm.build(folder / "a", random.Random(seed), external=False, op="Relu")
    b = fm.build(folder / "b", random.Random(seed), external=False, op="Sigmoid")
    live = folder / "model.onnx"
    shutil.copy(a.path, live)
    flapping = ctx.rng.random() < 0.5  # flapping from the start covers the digest-to-read window of any load
    delay, swaps = (ctx.rng.uniform(0.0, 1.0) if flapping else ctx.rng.uniform(0.2, 3.0)), [0]
    started = fr.time.perf_counter()

    def swap(process) -> None:
        if fr.time.perf_counter() - started > delay and (flapping or not swaps[0]):
            source = (b if swaps[0] % 2 == 0 else a).path
            shutil.copy(source, folder / "next.onnx")
            os.replace(folder / "next.onnx", live)
            swaps[0] += 1
    first = ctx.run("stages=[sanitize]", model=live, watch=swap)
    if first.code not in (0, 2):
        ctx.check(f"exit {first.code} when the model was replaced during the run: {first.lines()[-1:]}")
    manifest = ctx.run_dir() / "manifest.json"
    if first.code == 0 and manifest.is_file():
        digest = json.loads(manifest.read_text())["source"]["sha256"]
        expected = {hashlib.sha256(m.path.read_bytes()).hexdigest(): m.path for m in (a, b)}.get(digest)
        got = fm.op_types(ctx.run_dir() / "sanitize" / "model.onnx")
        if expected is not None and fm.op_types(expected)[1] not in got:
            ctx.check(f"the run recorded {expected.parent.name}'s digest but its output has {got[1]} nodes")
    again = ctx.run("stages=[sanitize]", name="again", model=a.path)
    ctx.check(fr.success(again))
    output = ctx.run_dir("again") / "sanitize" / "model.onnx"
    if again.code == 0 and "Sigmoid" in fm.op_types(output):
        ctx.check(f"model B's graph was served from the cache for model A ({swaps[0]} swaps from {delay:.2f} s)")


def data_swap(ctx: Context) -> None:
    """The sample data is replaced at a random moment of a run (or flaps between A and B every 50 ms):
    data B's values overflow FP16 where A's do not, so its evidence gives another plan. A's cached
    precision entry must be A's own plan (the one a fresh cache computes), never B's."""
    import numpy as np

    a = fm.sample_data(ctx.outside / "a.npz", ctx.model.width, ctx.rng.randrange(1000))
    b = ctx.outside / "b.npz"
    np.savez(b, x=(np.load(a)["x"] * 1e5).astype(np.float32))
    live = ctx.outside / "inputs.npz"
    shutil.copy(a, live)
    flapping = ctx.rng.random() < 0.5
    delay, swaps = (ctx.rng.uniform(0.0, 1.0) if flapping else ctx.rng.uniform(0.2, 2.0)), [0]
    started = fr.time.perf_counter()

    def swap(process) -> None:
        if fr.time.perf_counter() - started > delay and (flapping or not swaps[0]):
            shutil.copy(b if swaps[0] % 2 == 0 else a, ctx.outside / "next.npz")
            os.replace(ctx.outside / "next.npz", live)
            swaps[0] += 1
    stages = "stages=[sanitize,precision]"
    first = ctx.run(f"data.path={live}", stages, watch=swap)
    if first.code not in (0, 2):
        ctx.check(f"exit {first.code} when the data was replaced during the run: {first.lines()[-1:]}")
    shutil.copy(a, ctx.outside / "next.npz")
    os.replace(ctx.outside / "next.npz", live)  # A again, at the same path: the same key as A's first run
    again = ctx.run(f"data.path={live}", stages, name="again")
    truth = fr.run_cli(ctx.workdir, [f"model.path={ctx.model.path}", f"data.path={live}", stages,
                                     f"hydra.run.dir={ctx.run_dir('truth')}"], ctx.workdir / "fresh-cache")
    ctx.check(fr.success(again), fr.success(truth))
    plans = [ctx.run_dir(name) / "precision" / "precision_plan.json" for name in ("again", "truth")]
    if all(p.is_file() for p in plans) and _plan_nodes(plans[0]) != _plan_nodes(plans[1]):
        ctx.check(f"data B's precision plan was served from the cache for data A ({swaps[0]} swaps from {delay:.2f} s)")
    shutil.rmtree(ctx.workdir / "fresh-cache", ignore_errors=True)


def _plan_nodes(path: Path) -> object:
    import json

    return [(node["name"], node["precision"]) for node in json.loads(path.read_text())["nodes"]]
