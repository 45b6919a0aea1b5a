"""The fake cluster's data: objects, one resourceVersion counter, per-resource history, subresources."""
