"""Issue 14 items 11 and 17: `--version`, `--help` and the cost of the front door, through
the real command line. Timings live in bench/front_door/front_door.py; these tests check the structure
that makes it fast (no Hydra for --help, one composition per run, matplotlib only for a plot)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import onnx

import trtpipe
from trtpipe.config.locate import recipe_dirs


def trtpipe_cmd(*args: str, cwd: Path, env: dict | None = None, python: tuple[str, ...] = ()):
    environment = {**os.environ, **(env or {})}
    environment.pop("TRTPIPE_DEBUG", None)
    return subprocess.run([sys.executable, *python, "-m", "trtpipe", *args], cwd=cwd, env=environment,
                          capture_output=True, text=True, timeout=120)


def test_version_names_trtpipe_and_the_tools_not_hydra(tmp_path):
    done = trtpipe_cmd("--version", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == f"trtpipe {trtpipe.__version__}"
    tools = dict(line.split(None, 1) for line in lines[1:])
    assert tools["onnx"] == onnx.__version__
    assert set(tools) == {"onnx", "onnxruntime", "polygraphy", "tensorrt"}
    assert "hydra" not in done.stdout.lower()


def test_help_lists_every_recipe_and_user_directory_without_schema_internals(tmp_path):
    user = tmp_path / "team_recipes"
    user.mkdir()
    (user / "team_int8ish.yaml").write_text("# @package _global_\n# Our team's settings. More text.\nprecision:\n  default: fp32\n")
    done = trtpipe_cmd("--help", cwd=tmp_path, env={"TRTPIPE_RECIPES": str(user)}, python=("-X", "importtime"))
    assert done.returncode == 0, done.stderr
    shipped = sorted(p.stem for p in recipe_dirs()[0].glob("*.yaml"))
    assert len(shipped) >= 6
    for name in shipped:
        assert f"    {name} " in done.stdout, name
    assert str(user) in done.stdout and "team_int8ish" in done.stdout and "Our team's settings" in done.stdout
    assert "schema" not in done.stdout  # no `schema` options, no trtpipe_schema
    assert "precision        default, fp32, naive" in done.stdout
    imported = {line.split("|")[-1].strip() for line in done.stderr.splitlines() if line.startswith("import time:")}
    assert not {name for name in imported if name.split(".")[0] in ("hydra", "omegaconf", "onnx", "numpy")}


def test_help_without_user_recipes_says_how_to_add_them(tmp_path):
    env = {key: value for key, value in os.environ.items() if key != "TRTPIPE_RECIPES"}
    done = subprocess.run([sys.executable, "-m", "trtpipe", "-h"], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0
    assert "set TRTPIPE_RECIPES=DIR" in done.stdout
    assert f"Cache: {os.environ['TRTPIPE_CACHE']}" in done.stdout


_COUNT_COMPOSITIONS = """
import atexit, sys
from hydra._internal.hydra import Hydra
calls = []
original = Hydra.compose_config
def counted(self, *args, **kwargs):
    calls.append(1)
    return original(self, *args, **kwargs)
Hydra.compose_config = counted
heavy = ("numpy", "onnx", "onnxruntime", "matplotlib", "hydra_plugins")  # IMPORTED: test_front_door_cached.py
first_importer = {}  # heavy module -> where trtpipe first imported it: a failing assert names the culprit
class _Watch:
    def find_spec(self, name, path=None, target=None):
        if name in heavy and name not in first_importer:
            import traceback
            frames = [f for f in traceback.extract_stack()[:-1] if "trtpipe" in f.filename]
            first_importer[name] = f"{frames[-1].filename}:{frames[-1].lineno}" if frames else "?"
        return None
sys.meta_path.insert(0, _Watch())
atexit.register(lambda: sys.stderr.write(f"COMPOSITIONS={len(calls)} MATPLOTLIB={'matplotlib' in sys.modules} "
                                         f"IMPORTED={sorted(m for m in heavy if m in sys.modules)} "
                                         f"BY={ {m: w for m, w in first_importer.items() if m in sys.modules} }\\n"))
sys.argv = ["trtpipe", *sys.argv[1:]]
from trtpipe.cli import main
main()
"""


def test_a_cached_run_composes_once_and_never_imports_matplotlib(tmp_path):
    script = tmp_path / "count.py"
    script.write_text(_COUNT_COMPOSITIONS)
    env = {**os.environ, "TRTPIPE_CACHE": str(tmp_path / "cache")}
    env.pop("TRTPIPE_DEBUG", None)

    def run(name: str):
        return subprocess.run([sys.executable, str(script), f"hydra.run.dir={tmp_path / name}"], cwd=tmp_path,
                              env=env, capture_output=True, text=True, timeout=300)

    cold = run("cold")
    assert cold.returncode == 0, cold.stderr
    # A passing validation draws no picture (validate.plot_passed=false): matplotlib is not imported.
    assert "COMPOSITIONS=1 MATPLOTLIB=False" in cold.stderr
    assert not (tmp_path / "cold" / "validate" / "accuracy.png").exists()
    warm = run("warm")
    assert warm.returncode == 0, warm.stderr
    assert "COMPOSITIONS=1 MATPLOTLIB=False" in warm.stderr
    assert warm.stdout.count(" cached ") >= 4  # sanitize, upgrade_opset, precision, validate
    assert not (tmp_path / "warm" / "validate" / "accuracy.png").exists()


def test_a_sweep_still_goes_through_hydra(tmp_path):
    env = {"TRTPIPE_CACHE": str(tmp_path / "cache")}
    done = trtpipe_cmd("-m", "stages=[sanitize]", "sanitize.toposort=true,false",
                       f"hydra.sweep.dir={tmp_path / 'sweep'}", cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "sweep" / "0" / "manifest.json").is_file() and (tmp_path / "sweep" / "1" / "manifest.json").is_file()


def test_importing_the_cli_imports_no_plotting_and_no_hydra(tmp_path):
    code = ("import sys, trtpipe.cli, trtpipe.stages; "
            "print(sorted(m for m in ('matplotlib', 'hydra') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_a_recipe_that_sets_multirun_sweeps_as_hydra_main_would(tmp_path):
    """A recipe's `hydra.mode: MULTIRUN` (with sweeper params) is a sweep, not one run."""
    recipes = tmp_path / "recipes"
    recipes.mkdir()
    (recipes / "mysweep.yaml").write_text(
        "# @package _global_\ndefaults:\n  - fp32\nhydra:\n  mode: MULTIRUN\n  sweeper:\n    params:\n"
        "      sanitize.toposort: true,false\n")
    env = {"TRTPIPE_CACHE": str(tmp_path / "cache"), "TRTPIPE_RECIPES": str(recipes)}
    done = trtpipe_cmd("+recipe=mysweep", "stages=[sanitize]", f"hydra.sweep.dir={tmp_path / 'sweep'}",
                       f"hydra.run.dir={tmp_path / 'single'}", cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stderr
    toposorts = {json.loads((tmp_path / "sweep" / job / "manifest.json").read_text())["config"]["sanitize"]["toposort"]
                 for job in ("0", "1")}
    assert toposorts == {True, False}
    assert not (tmp_path / "single").exists()


def test_a_single_run_records_the_hydra_config_hydra_main_would(tmp_path):
    """The one-composition path is Hydra 1.3's RUN path: same .hydra/hydra.yaml (version_base 1.3),
    and `hydra.job.chdir=null` neither warns nor changes directory (Hydra 1.1 would)."""
    import yaml

    env = {"TRTPIPE_CACHE": str(tmp_path / "cache")}
    written = {}
    for name, extra in (("single", ()), ("hydra_main", ("hydra.mode=RUN",))):  # hydra.mode=...: hydra.main
        done = trtpipe_cmd("stages=[sanitize]", "hydra.job.chdir=null", f"hydra.run.dir={tmp_path / name}", *extra,
                           cwd=tmp_path, env=env)
        assert done.returncode == 0, done.stderr
        assert "chdir" not in done.stderr
        manifest = (tmp_path / name / "manifest.json")
        assert manifest.is_file() and not (tmp_path / name / name).exists()
        written[name] = yaml.safe_load((tmp_path / name / ".hydra" / "hydra.yaml").read_text())["hydra"]
    single, main = written["single"], written["hydra_main"]
    assert single["runtime"]["version_base"] == "1.3"
    for record in (single, main):  # the run-specific values
        record["run"].pop("dir")
        record["runtime"].pop("output_dir")
        record["overrides"]["hydra"] = [o for o in record["overrides"]["hydra"] if not o.startswith("hydra.run.dir=")]
    assert single == main


def test_help_and_version_report_a_user_error_in_one_line(tmp_path):
    """A bad TRTPIPE_RECIPES met by --help is the usual one-line error with its Fix, exit 2."""
    for flag in ("--help", "-h"):
        done = trtpipe_cmd(flag, cwd=tmp_path, env={"TRTPIPE_RECIPES": str(tmp_path / "nonexistent")})
        assert done.returncode == 2, done.stderr
        assert done.stderr.startswith("trtpipe: error: TRTPIPE_RECIPES") and "Fix:" in done.stderr
        assert "Traceback" not in done.stderr and done.stderr.count("\n") == 1, done.stderr


def test_version_finds_a_tool_installed_under_another_distribution_name(tmp_path):
    """TensorRT installed as tensorrt-cu12 (onnxruntime as onnxruntime-gpu): `import tensorrt` works,
    so --version must name its version, not 'not installed'."""
    site = tmp_path / "site"
    info = site / "tensorrt_cu12-10.8.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: tensorrt-cu12\nVersion: 10.8.0\n")
    (info / "top_level.txt").write_text("tensorrt\n")
    (site / "tensorrt").mkdir()
    (site / "tensorrt" / "__init__.py").write_text("")
    pythonpath = os.pathsep.join(p for p in (str(site), os.environ.get("PYTHONPATH", "")) if p)
    done = trtpipe_cmd("--version", cwd=tmp_path, env={"PYTHONPATH": pythonpath})
    assert done.returncode == 0, done.stderr
    tools = dict(line.split(None, 1) for line in done.stdout.splitlines()[1:])
    assert tools["tensorrt"] == "10.8.0 (tensorrt-cu12)"


def test_help_into_a_pipe_its_reader_closes_leaves_no_traceback(tmp_path):
    """`trtpipe --help | head -1` printed a BrokenPipeError traceback."""
    command = f"'{sys.executable}' -m trtpipe --help | head -1"
    done = subprocess.run(["bash", "-c", f"set -o pipefail; {command}"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=60, env={**os.environ, "PYTHONPATH": str(Path(trtpipe.__file__).parents[1])})
    assert done.stdout.startswith("trtpipe:") and done.stdout.count("\n") == 1
    assert done.stderr == ""
    assert done.returncode in (0, 141)  # 141 when the reader left before the help was written


def test_shell_completion_into_a_closed_pipe_exits_141_with_nothing_on_stderr(tmp_path):
    """`trtpipe -sc install=bash | head -1` exited 2 in 8 of 20 tries: "cannot write the run
    directory: ... Broken pipe" with a fix that does not apply. The reader here leaves before
    trtpipe writes anything, so every try meets the closed pipe (no race to lose)."""
    env = {**os.environ, "PYTHONPATH": str(Path(trtpipe.__file__).parents[1])}
    for _ in range(3):
        victim = subprocess.Popen([sys.executable, "-m", "trtpipe", "-sc", "install=bash"], cwd=tmp_path, env=env,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        victim.stdout.close()
        stderr = victim.stderr.read()
        assert victim.wait(timeout=60) == 141, stderr
        assert stderr == ""
