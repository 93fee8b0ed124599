"""The manual as a site (issue 33 item 2): what makes `mkdocs build --strict` a manual people look at.

- `readme_hook.py`: the mkdocs hook that makes the site's index the README's first screen
  (one text, not two that drift apart);
- `figures.py` (`python -m bench.docs_site`): regenerates every picture under `docs/img/` from
  real trtpipe runs on the built-in models and from the stage classes: the accuracy picture of a
  failing and of a passing run, the pipeline's stages, a precision plan drawn on a small graph;
  `pipeline_svg.py` and `plan_svg.py` draw the two diagrams, `runs.py` makes the runs;
- `browser.py` (`python -m bench.docs_site.browser SITE_DIR`): headless Chromium, driven over
  its DevTools pipe, loads every page of a built site from file://, follows the navigation, and
  reports broken images, broken links and script errors (`cdp_pipe.py` is the pipe).

Imports trtpipe (the stages, the built-in models) and the standard library; matplotlib's Pillow
for PNGs. tests/test_docs.py, tests/test_docs_figures_current.py and tests/test_docs_browser.py
check the result.
"""
