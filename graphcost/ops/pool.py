"""pool ops (rules to be written)."""
