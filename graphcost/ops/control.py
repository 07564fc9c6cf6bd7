"""control ops (rules to be written)."""
