"""What a stage is: a small class with one `run`, declared inputs and outputs.

Naming rule (after Polygraphy): stage classes are `<Verb><Object>` in-place steps
(`SanitizeModel`, `UpgradeOpset`); graph converters are `<Target>From<Source>`.

A stage is a pure function of (input artifact files, its own config) → files it
writes into `out_dir`. It never reads another stage's config and never passes live
objects on. Bump `version` whenever a change of the code can change its outputs:
the version is part of the cache key.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar, Mapping

# Artifact kinds (the manifest contract): model, plan, report, engine, layer_info, audit, trtexec.
SOURCE_KIND = "model"

# A stage's input files are trtpipe's own: verified cache entries, or the runner's private
# snapshot of the source (runner/source_snapshot.py), never the user's folder. So a stage
# may read an entry's weights file that is a hard link to its input entry's (what
# `onnx_io.save_model(link_data_under=)` makes): `load_model(..., hard_links_ok=OWN_INPUTS)`.
# The user's files are checked without it (`trtpipe.source`, the snapshot).
OWN_INPUTS = True


@dataclass
class StageOutcome:
    """What `run` returns: artifact kind → file name inside out_dir, and a one-line fact."""

    outputs: dict[str, str]
    summary: str = ""
    status: str = "ran"  # "ran", or "deferred" for work that needs hardware this machine lacks
    details: dict = field(default_factory=dict)
    # A text file (in out_dir) the console shows after the stage, cached or not.
    console_file: str | None = None
    # True when the pipeline should stop after this stage (e.g. precision.list_only).
    stop: bool = False
    # Set when the stage ran to completion but its verdict is a failure (validation):
    # the outputs are cached and published, and the run exits 1 with this message.
    failed: str | None = None


class Stage:
    name: ClassVar[str]
    version: ClassVar[str]
    consumes: ClassVar[tuple[str, ...]]
    produces: ClassVar[tuple[str, ...]]
    # Distributions whose versions can change this stage's outputs (part of the key).
    tools: ClassVar[tuple[str, ...]] = ()
    # Stages that run the model receive the resolved `data` block in config["data"].
    uses_data: ClassVar[bool] = False
    # Stages sized by the sample data (the build's profile of a dynamic model) receive the data's
    # shapes in config["data_shapes"]: input name -> its distinct shapes (trtpipe.data.sample_shapes).
    uses_data_shapes: ClassVar[bool] = False
    # Inputs used when an earlier stage produced them (validate's engine candidate).
    optional_consumes: ClassVar[tuple[str, ...]] = ()
    # Stages with shared state in the cache (the timing cache) receive config["cache_dir"].
    uses_cache_dir: ClassVar[bool] = False
    # The source model is read from a private snapshot whose digest is the key's
    # (runner/source_snapshot.py); False for a stage whose outputs name the source's own path.
    snapshot_source: ClassVar[bool] = True

    @classmethod
    def key_facts(cls, config: Mapping | None = None) -> dict:
        """Facts of this machine that change the outputs (GPU, driver...): part of the key.
        `config`: the stage's own config (which backend the facts are about)."""
        return {}

    @classmethod
    def key_input_places(cls, inputs: Mapping[str, Path]) -> dict:
        """Where inputs come from, for a stage whose outputs name that place (build's
        trtexec.txt names `../<stage>/model.onnx`): part of the key, so the same bytes
        published by another stage are not given a stale path."""
        return {}

    @classmethod
    def key_config(cls, config: Mapping) -> dict:
        """The part of the stage's config that changes its outputs: what goes into the key.

        Decision: a setting the stage does not read in this configuration (the search's
        tolerance while the search is off) is left out, so changing it re-runs nothing.
        The stage still receives its whole config."""
        return dict(config)

    @classmethod
    def key_files(cls, config: Mapping) -> list[Path]:
        """Files the config names whose content changes the outputs (plugin libraries):
        their digests are part of the key, so a rebuilt file at the same path is noticed."""
        return []

    def run(self, inputs: Mapping[str, Path], config: Mapping, out_dir: Path) -> StageOutcome:
        raise NotImplementedError
