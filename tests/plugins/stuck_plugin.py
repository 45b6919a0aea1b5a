#!/usr/bin/env python3
"""An exec credential plugin that does not finish, for tests; $STUCK_MODE says how.

- ``background``: prints a valid ExecCredential, starts a child that inherits its stdout and
  sleeps (writing the child's pid to $STUCK_PID), and exits 0: the output never ends.
- ``flood``: writes to stdout for ever.
- ``flood-stderr``: writes to stderr for ever (stdout stays quiet).
- ``silent``: writes its pid to $STUCK_PID and sleeps, printing nothing.

Arguments are ignored (tests pass secrets there to check they are never shown).
"""

import json
import os
import subprocess
import sys
import time

mode = os.environ.get("STUCK_MODE", "silent")
pid_file = os.environ.get("STUCK_PID")
if mode == "background":
    credential = {
        "apiVersion": "client.authentication.k8s.io/v1",
        "kind": "ExecCredential",
        "status": {"token": "t"},
    }
    sys.stdout.write(json.dumps(credential))
    sys.stdout.flush()
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    if pid_file:
        with open(pid_file, "w") as f:
            f.write(str(child.pid))
    sys.exit(0)
if mode in ("flood", "flood-stderr"):
    out = sys.stdout if mode == "flood" else sys.stderr
    block = "x" * 65536
    while True:
        out.write(block)
if pid_file:
    with open(pid_file, "w") as f:
        f.write(str(os.getpid()))
time.sleep(120)
