"""Measurement helpers shared by the scripts: timed runs, the speculative card."""
