"""The fake's authentication (tokens, certificates) and authorization (RBAC)."""
