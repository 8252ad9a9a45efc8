"""Continued training on data the model mostly knows (issue 30)."""
