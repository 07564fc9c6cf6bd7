"""misc ops (rules to be written)."""
