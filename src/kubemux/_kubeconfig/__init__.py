"""Kubeconfig: load, merge with kubectl's rules, typed schema, fingerprints, following the files."""
