"""Seeing inside a run: PROFILE=1 traces (profile.py). Imports only helpers, so every layer may record into it."""
