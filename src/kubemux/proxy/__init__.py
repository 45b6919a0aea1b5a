"""The Kubernetes API of every kubeconfig context, served from kubemux's caches."""
