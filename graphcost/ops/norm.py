"""norm ops (rules to be written)."""
