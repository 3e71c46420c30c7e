"""The series on disk: the series file and its patches, their stable export, and what may be
written where."""
