"""The steps of an apply: overlay, patching, verification, tests (each one job)."""
