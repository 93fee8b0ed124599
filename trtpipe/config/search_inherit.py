"""The search's tolerances inherit, key by key, what the user did not set from validate's.

`precision.search.tolerance` defaults to `${validate.tolerance}` (and
`precision.search.outputs` to `${validate.outputs}`): the search judges plans by
the bounds the validation will apply. Setting one bound for the search alone,
`++precision.search.tolerance.rel_l2=0.05`, replaces that interpolation by a
mapping holding only `rel_l2`, so the search fell back to the built-in bounds
for every other key instead of validate's (the transformer recipe's
`cosine_min: 0.9999` became 0.999): it could choose a plan the validation then
fails.

Decisions:
- Keys the user's mapping lacks are filled with the resolved values of the same
  `validate` keys (copies, not interpolations: output names such as `logits:0`
  or `y/fp16` cannot be written in an interpolation path), so the manifest
  records the bounds the search used. A key the user sets, null included, is
  kept: null means what it means in validate.tolerance (the built-in bound).
- The keys filled are logged at DEBUG (the run's `trtpipe.log`), so the decision is on record.
- `search.outputs` likewise: an output named only in `validate.outputs` is
  inherited whole, and an output named in both inherits the keys it lacks.
- Applied to the composed config before anything runs (api._execute), after the
  checks, so an error still names the key as the user typed it.
"""

from __future__ import annotations

from omegaconf import DictConfig, OmegaConf, open_dict


def inherit_search_tolerances(cfg: DictConfig) -> list[str]:
    """Fill the search's partial tolerance mappings from validate's; returns the keys filled."""
    precision, validate = cfg.get("precision"), cfg.get("validate")
    if not isinstance(precision, DictConfig) or not isinstance(validate, DictConfig):
        return []
    search = precision.get("search")
    if not isinstance(search, DictConfig):
        return []
    filled: list[str] = []
    with open_dict(search):
        filled += _fill(search, "tolerance", validate, "precision.search.tolerance")
        if _own_mapping(search, "outputs") and isinstance(validate.get("outputs"), DictConfig):
            outputs = search.outputs
            with open_dict(outputs):
                for name in validate.outputs:
                    if name not in outputs:
                        outputs[name] = _plain(validate.outputs[name])
                        filled.append(f"precision.search.outputs.{name}")
                    elif _own_mapping(outputs, name) and isinstance(validate.outputs.get(name), DictConfig):
                        filled += _fill_keys(outputs[name], validate.outputs[name], f"precision.search.outputs.{name}")
    return filled


def _fill(search: DictConfig, key: str, validate: DictConfig, target: str) -> list[str]:
    if not _own_mapping(search, key) or not isinstance(validate.get(key), DictConfig):
        return []
    return _fill_keys(search[key], validate[key], target)


def _fill_keys(mine: DictConfig, theirs: DictConfig, target: str) -> list[str]:
    filled = []
    with open_dict(mine):
        for key in theirs:
            if key not in mine:
                mine[key] = _plain(theirs[key])
                filled.append(f"{target}.{key}")
    return filled


def _plain(value):
    return OmegaConf.to_container(value, resolve=True) if isinstance(value, DictConfig) else value


def _own_mapping(parent: DictConfig, key: str) -> bool:
    """A mapping the user wrote (not the default interpolation, which already inherits everything)."""
    return not OmegaConf.is_interpolation(parent, key) and isinstance(parent.get(key), DictConfig)

