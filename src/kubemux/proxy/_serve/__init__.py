"""The server: the ASGI app, the HTTP protocol with its token and Host checks, TLS."""
