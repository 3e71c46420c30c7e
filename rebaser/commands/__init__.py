"""The commands, one module a verb: each reads its arguments and prints its own output."""
