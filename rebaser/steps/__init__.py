"""The steps an apply runs (overlay, patches, the fast lane, checks, tests) and what they record."""
