"""The property tests' counters are printed by `tests/proofs.py`."""
