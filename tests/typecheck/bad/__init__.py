"""Mistakes a type checker must report: each ``# expect-error`` line, and no other."""
