"""Downstream watches: views shared per (source, format, selector), watchers and their budgets."""
