"""Registry: WatcherRegistry, context generations, informer slots, changes and subscriptions, status."""
