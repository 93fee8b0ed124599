"""Sweeps through hydra/launcher=ray on a local Ray head (issue 34 item 3)."""
