"""Authorization layer (issue 33): who a bearer token is and what that user may do.

``User``; Kubernetes RBAC evaluated locally as kube-apiserver evaluates it (rules, bindings,
the 403 it writes); per-user permission sets built once and reused; later the TokenReview
cache, the SubjectAccessReview fallback and revocation signals. Import from the module that
defines a name.
"""
