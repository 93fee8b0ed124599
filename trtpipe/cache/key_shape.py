"""Recorded key material read in today's key shape, so `trtpipe-verify` of an old manifest
compares like with like.

Decision: when a stage's key drops a setting the stage does not read (Stage.key_config,
e.g. precision's search tolerance with the search off), manifests written before the
change record a key holding it. Verify cuts the recorded config the same way before it
compares; the stage is still `identical` only when the recorded key is the hash of the
recorded material (nothing edited), the cut material hashes to the rebuild's key, and
every output digest agrees.
"""

from __future__ import annotations

from trtpipe.errors import UserError


def in_current_shape(material: dict) -> dict:
    """The material with its config cut to what the stage's key holds today (unchanged if unknown)."""
    from trtpipe.stages import stage_class

    name, config = material.get("stage"), material.get("config")
    if not isinstance(name, str) or not isinstance(config, dict):
        return material
    try:
        return {**material, "config": stage_class(name).key_config(config)}
    except (UserError, KeyError, TypeError, AttributeError):  # an unknown stage or a config of another shape
        return material


def key_of(material: dict) -> str | None:
    """The cache key of this material (None when no key can hold it: NaN or infinity)."""
    from trtpipe.cache.cache import cache_key

    try:
        return cache_key(material)
    except (ValueError, TypeError):
        return None


def reshaped_key_matches(recorded_key, recorded: dict, current: dict, new_key) -> bool:
    """True when the recorded key is honest for the recorded material and the reshaped
    material gives the rebuild's key."""
    if recorded == current or not isinstance(recorded_key, str):
        return False
    return key_of(recorded) == recorded_key and key_of(current) == new_key
