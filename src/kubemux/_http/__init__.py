"""HTTP: the context's client (kubernetes-asyncio over aiohttp), transport limits, SOCKS5, upstream requests."""
