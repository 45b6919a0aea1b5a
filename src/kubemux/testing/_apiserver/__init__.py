"""The fake API server's HTTP side: routing, GET/LIST/WATCH, writes, discovery, OpenAPI."""
