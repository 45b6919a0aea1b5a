"""FakeCluster itself and what drives it: credentials, CRDs, faults, observation, workloads, kubeconfigs."""
