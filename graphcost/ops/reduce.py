"""reduce ops (rules to be written)."""
