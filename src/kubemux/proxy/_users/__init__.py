"""``kubemux proxy --user-tokens``: each request authenticated with its user's own token, cached answers authorized per user, open watches ended on revocation, an audit log."""
