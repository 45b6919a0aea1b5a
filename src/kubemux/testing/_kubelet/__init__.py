"""What the fake kubelet does: container logs, exec, attach, port-forward, pod states."""
