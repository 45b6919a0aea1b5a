"""A kubeconfig exec plugin for tests: prints an ExecCredential carrying $GATE_TOKEN.

- $GATE_FILE set and missing: fails (exit 1, a message on stderr), as a plugin does when the
  VPN or the cloud login is not there yet.
- $GATE_HANG set: writes its pid to that file and hangs.
"""

import json
import os
import sys
import time

hang = os.environ.get("GATE_HANG")
if hang:
    with open(hang, "w") as handle:
        handle.write(str(os.getpid()))
    time.sleep(3600)
gate = os.environ.get("GATE_FILE")
if gate and not os.path.exists(gate):
    print("gate closed: no credentials yet", file=sys.stderr)
    sys.exit(1)
print(
    json.dumps(
        {
            "apiVersion": "client.authentication.k8s.io/v1",
            "kind": "ExecCredential",
            "status": {"token": os.environ["GATE_TOKEN"]},
        }
    )
)
