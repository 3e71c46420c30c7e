"""The steps of an apply: patching, verification, tests (each one job)."""
