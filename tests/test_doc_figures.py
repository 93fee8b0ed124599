"""Issue 24 item 1: every figure README.md and docs/*.md quote is produced by a script in bench/ and
checked against the result file it cites (bench/<family>/results.json), with no benchmark run.
The rules are docs/figures.md's; bench/common/figures.py applies them."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from bench.common.figures import check, formatted, matches, update_text

REPO = Path(__file__).resolve().parent.parent


def test_every_cited_figure_matches_its_result_and_none_is_left_uncited():
    problems = check(REPO)
    assert not problems, "\n".join(map(str, problems))


@pytest.fixture
def copy(tmp_path):
    """README, docs and the committed result files, to be edited: the checker must see the edits."""
    shutil.copy(REPO / "README.md", tmp_path / "README.md")
    shutil.copytree(REPO / "docs", tmp_path / "docs")
    for results in REPO.glob("bench/*/results.json"):
        (tmp_path / results.parent.relative_to(REPO)).mkdir(parents=True)
        shutil.copy(results, tmp_path / results.relative_to(REPO))
    assert not check(tmp_path)
    return tmp_path


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, old
    path.write_text(text.replace(old, new, 1))


def test_a_changed_figure_fails(copy):
    # the search table's automatic plan as the README once said it (issue 24): 53 FP32 nodes, 14 Casts
    _edit(copy / "docs" / "precision.md", '[57](figures.md#search "transformer.automatic.fp32")',
          '[53](figures.md#search "transformer.automatic.fp32")')
    problems = [str(p) for p in check(copy)]
    assert len(problems) == 1 and "docs/precision.md" in problems[0] and "transformer.automatic.fp32" in problems[0]


def test_a_rerun_that_changes_a_result_fails_until_the_page_follows(copy):
    path = copy / "bench" / "front_door" / "results.json"
    record = json.loads(path.read_text())
    record["figures"]["cached.wall_s"] = 0.59  # the cached run the README once quoted
    transcript = record["figures"]["transcript.transformer_fp16"]
    sanitize = re.search(r"  sanitize +ran +([\d.]+)s  152 -> 120 nodes", transcript).group(1)
    record["figures"]["transcript.transformer_fp16"] = transcript.replace(
        f"{sanitize}s  152 -> 120 nodes, 32 folded", "9.87s  152 -> 119 nodes, 33 folded")
    path.write_text(json.dumps(record))
    problems = [str(p) for p in check(copy)]
    assert len(problems) == 4, problems  # README: the figure and the transcript; how-it-works: the transcript; cache.md
    assert all("cached.wall_s" in p or "transcript.transformer_fp16" in p for p in problems)
    for page in [copy / "README.md", *(copy / "docs").glob("*.md")]:  # --update rewrites the numbers
        page.write_text(update_text(page.read_text(), lambda family: json.loads(
            (copy / "bench" / family / "results.json").read_text())))
    assert not check(copy)
    readme = (copy / "README.md").read_text()
    assert '[0.6 s](docs/figures.md#front_door "cached.wall_s")' in readme  # 1 decimal, as shown
    assert "sanitize        ran        9.87s  152 -> 119 nodes, 33 folded  (...)" in readme  # its elision kept


def test_an_uncited_figure_fails_and_a_marked_one_passes(copy):
    readme = copy / "README.md"
    _edit(readme, "## Your own model\n", "## Your own model\n\nA cached run takes 0.59 s.\n")
    assert [p.text for p in check(copy)] == ["uncited figure '0.59 s': cite its result or mark it not measured "
                                             "(docs/figures.md)"]
    _edit(readme, "0.59 s.", '[0.59 s](docs/figures.md#not-measured "an example").')
    _edit(readme, "## Your own model\n", "## Your own model\n\nWithin `3 s`, 2-3× or 4 %.\n")
    assert [p.text.split(":")[0] for p in check(copy)] == ["uncited figure '2-3×'", "uncited figure '4 %'"]


def test_a_changed_transcript_fails(copy):
    _edit(copy / "docs" / "how-it-works.md", "60 FP16 / 17 FP32 nodes", "60 FP16 / 18 FP32 nodes")
    problems = [str(p) for p in check(copy)]
    assert len(problems) == 1 and "differs from front_door:transcript.transformer_fp16" in problems[0]
    _edit(copy / "docs" / "how-it-works.md", "60 FP16 / 18 FP32 nodes", "60 FP16 / 17 FP32 nodes")
    text = (copy / "docs" / "how-it-works.md").read_text()
    cited = text.index('([Recorded](figures.md#front_door "transcript.transformer_fp16")')
    (copy / "docs" / "how-it-works.md").write_text(text[:cited] + "\n" + text[cited:])  # no longer right after it
    assert {p.text.split(" but")[0].split(" must")[0] for p in check(copy)} == {
        "cites the transcript front_door:transcript.transformer_fp16", "a transcript of a run"}


def test_a_missing_result_file_or_key_fails(copy):
    (copy / "bench" / "search" / "results.json").unlink()
    assert any("bench/search/results.json, which does not exist" in p.text for p in check(copy))
    _edit(copy / "README.md", '"cached.wall_s"', '"cached.wall_seconds"')
    assert any("'cached.wall_seconds', not in bench/front_door/results.json" in p.text for p in check(copy))


@pytest.mark.parametrize("shown, value, ok", [
    ("0.114 s", 0.1144, True), ("0.114 s", 0.1146, False), ("54", 53.76, True), ("54", 53.4, False),
    ("1,060", 1060, True), ("1.52e-4", 0.000152, True), ("1.52e-4", 0.0001526, False), ("100%", 100.0, True),
    ("12 / 13", [12, 13], True), ("12 / 13", [12, 14], False), ("12", [12, 13], False),
    ("1.81-2.23 s", [1.81, 2.23], True)])
def test_the_rounding_rule(shown, value, ok):
    assert (matches(shown, value) is None) == ok


def test_numbers_are_rewritten_in_the_style_shown():
    assert [formatted(t, v) for t, v in (("0.114", 0.1237), ("1,060", 2092), ("1.52e-4", 3.346e-4), ("54", 26.07))] \
        == ["0.124", "2,092", "3.35e-4", "26"]


def test_the_checker_command_reports_nothing_on_the_repository():
    done = subprocess.run([sys.executable, "-m", "bench.common.figures"], cwd=REPO, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stdout
    assert done.stdout.strip().endswith("0 problem(s) in the figures of README.md and docs/")


def test_numbers_in_code_are_not_figures_but_a_run_at_the_end_of_a_page_must_be_cited(copy):
    page = copy / "docs" / "gpu.md"
    page.write_text(page.read_text() + "\n- a list item:\n\n  ```\n  took 0.59 s\n  ```\n\n```\n$ trtpipe\nran 0.5 s\n```\n")
    assert [(p.path, p.text) for p in check(copy)] == [
        ("docs/gpu.md", "a transcript of a run must be cited on the line after it")]
