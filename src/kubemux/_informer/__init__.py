"""Informers: the reflector loop (LIST or WatchList, WATCH, relist, backoff), formats, discovery."""
