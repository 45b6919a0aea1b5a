"""Credentials: one provider per kubeconfig user (exec plugins, token files, OIDC), single-flight."""
