"""The resumable apply: the state machine that runs the steps, its state and its report."""
