"""Wire: decoding lines and pages, undecodable-object records, Table ages, informer value types (sync)."""
