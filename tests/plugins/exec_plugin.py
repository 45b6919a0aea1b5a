#!/usr/bin/env python3
"""A kubectl exec credential plugin for tests: prints an ExecCredential, logs each run.

Configured through the environment (kubeconfig ``exec.env`` or inherited):

KMX_PLUGIN_LOG      append one JSON line per run (pid, time, KUBERNETES_EXEC_INFO, stdin tty)
KMX_PLUGIN_KEY      signing key of the FakeCluster: mint a signed token (kubemux.testing)
KMX_PLUGIN_USER     the user the token names (default "plugin-user")
KMX_PLUGIN_TTL      token lifetime in seconds; sets expirationTimestamp (default: none)
KMX_PLUGIN_TOKEN    return this fixed token instead
KMX_PLUGIN_CERT     return the client certificate (PEM file) ...
KMX_PLUGIN_CERTKEY  ... and its key (PEM file)
KMX_PLUGIN_API      apiVersion to answer with (default: the one KUBERNETES_EXEC_INFO asks for)
KMX_PLUGIN_FAIL     print this to stderr and exit 1
KMX_PLUGIN_HANG     log the run, then sleep this many seconds before answering
"""

from __future__ import annotations

import datetime
import hashlib
import hmac
import json
import os
import sys
import time


def main() -> int:
    env = os.environ
    info_text = env.get("KUBERNETES_EXEC_INFO", "")
    try:
        info = json.loads(info_text) if info_text else {}
    except ValueError:
        info = {"unparsable": info_text}
    log = env.get("KMX_PLUGIN_LOG")
    if log:
        with open(log, "a", encoding="utf-8") as f:
            entry = {"pid": os.getpid(), "time": time.time(), "info": info}
            entry["stdin_tty"] = os.isatty(0) if not sys.stdin.closed else False
            f.write(json.dumps(entry) + "\n")
    if env.get("KMX_PLUGIN_HANG"):
        time.sleep(float(env["KMX_PLUGIN_HANG"]))
    if env.get("KMX_PLUGIN_FAIL"):
        sys.stderr.write(env["KMX_PLUGIN_FAIL"] + "\n")
        return 1
    api = env.get("KMX_PLUGIN_API") or info.get("apiVersion", "client.authentication.k8s.io/v1")
    status: dict[str, str] = {}
    now = time.time()
    ttl = float(env["KMX_PLUGIN_TTL"]) if env.get("KMX_PLUGIN_TTL") else None
    if env.get("KMX_PLUGIN_TOKEN"):
        status["token"] = env["KMX_PLUGIN_TOKEN"]
    elif env.get("KMX_PLUGIN_KEY"):
        user = env.get("KMX_PLUGIN_USER", "plugin-user")
        lifetime = ttl if ttl is not None else 86400.0
        body = f"kmx1.{int(now * 1e6)}.{int((now + lifetime) * 1e6)}.{user}"
        mac = hmac.new(env["KMX_PLUGIN_KEY"].encode(), body.encode(), hashlib.sha256)
        status["token"] = f"{body}.{mac.hexdigest()}"
    if env.get("KMX_PLUGIN_CERT"):
        with open(env["KMX_PLUGIN_CERT"], encoding="ascii") as f:
            status["clientCertificateData"] = f.read()
        with open(env["KMX_PLUGIN_CERTKEY"], encoding="ascii") as f:
            status["clientKeyData"] = f.read()
    if ttl is not None:
        # RFC 3339, whole seconds rounded down, as client-go writes metav1.Time
        expiry = datetime.datetime.fromtimestamp(int(now + ttl), datetime.UTC)
        status["expirationTimestamp"] = expiry.strftime("%Y-%m-%dT%H:%M:%SZ")
    json.dump({"apiVersion": api, "kind": "ExecCredential", "status": status}, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
