"""The proxy's wire pieces: Status bodies, raw ASGI answers, API paths, list bodies, continue tokens."""
