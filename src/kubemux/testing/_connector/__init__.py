"""FakeConnector: contexts whose objects live in memory, for tests without HTTP."""
