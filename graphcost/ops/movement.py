"""movement ops (rules to be written)."""
