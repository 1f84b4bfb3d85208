"""Seeing inside a run: PROFILE=1 traces (profile.py), the VIZ=1 record (record.py) and its web page (server.py,
layout.py, page.html). profile and record import only helpers, so every layer may record into them."""
