"""Small helpers every layer may use: plain config containers, folder checks, which process this is."""
