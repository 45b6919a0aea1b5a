"""Reads answered from the caches: the served stores, GET/LIST/WATCH, Table joins, read-your-writes marks."""
