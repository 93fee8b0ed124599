"""The stage runner and its content-addressed artifact cache."""
