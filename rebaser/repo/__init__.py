"""git plumbing: the runner, branches and worktrees, the late checkout, the scratch
repository, the repository lock, child processes and rebaser's refs."""
