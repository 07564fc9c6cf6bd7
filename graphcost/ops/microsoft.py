"""microsoft ops (rules to be written)."""
