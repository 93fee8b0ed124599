"""Configuration: dataclass schemas, their registration in Hydra's ConfigStore,
where the YAML files live (checkout or wheel), and the strict key check."""
