"""Runnable examples: `python -m lazygrad.examples.digits`."""
