"""Support loaded into the patched tree's pytest run."""
