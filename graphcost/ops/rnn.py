"""rnn ops (rules to be written)."""
