"""The fake API server's wire pieces: Status bodies, chunked framing, request info, patches, SPDY."""
