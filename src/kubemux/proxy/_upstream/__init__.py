"""What goes upstream: pass-through requests, the discovery cache, exec/attach/port-forward upgrades."""
