"""Cache: Store and its writer, snapshots, the bounded event history, Table rows, the event index (sync)."""
