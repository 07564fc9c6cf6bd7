"""quantized ops (rules to be written)."""
