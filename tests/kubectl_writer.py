"""A kubectl-style kubeconfig writer for tests: client-go's lock, then truncate and write in place.

    python kubectl_writer.py KUBECONFIG SECONDS RESULT [MIN_EDITS]

For SECONDS (and on until it has made MIN_EDITS edits, so a loaded machine still tests
contention), edits the file as kubectl's ``ModifyConfig`` does: create ``<file>.lock``
(``O_CREAT|O_EXCL``; when it exists kubectl fails, and this writer tries again a moment later,
as a user re-running the command would), read the file, add one context ``edit-<i>``, write it
back the way ``os.WriteFile`` does (truncate, then write; here in two halves with a pause in
between, a slow disk), remove the lock. Writes ``{"edits": n, "busy": b}`` to RESULT at the end.
"""

import json
import os
import sys
import time

import yaml


def main() -> None:
    path, seconds, result = sys.argv[1], float(sys.argv[2]), sys.argv[3]
    min_edits = int(sys.argv[4]) if len(sys.argv) > 4 else 0
    lock = path + ".lock"
    edits = busy = 0
    end = time.monotonic() + seconds
    while time.monotonic() < end or edits < min_edits:
        try:
            fd = os.open(lock, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0)
        except FileExistsError:
            busy += 1
            time.sleep(0.002)
            continue
        os.close(fd)
        try:
            with open(path, encoding="utf-8") as f:
                doc = yaml.safe_load(f)
            user = doc["contexts"][0]["context"]["user"]
            doc["contexts"].append(
                {"name": f"edit-{edits}", "context": {"cluster": "c", "user": user}}
            )
            data = yaml.safe_dump(doc).encode()
            with open(path, "wb") as f:  # O_TRUNC: the file is empty from here ...
                f.write(data[: len(data) // 2])
                f.flush()
                time.sleep(0.002)  # ... and half written here
                f.write(data[len(data) // 2 :])
        finally:
            os.unlink(lock)
        edits += 1
        time.sleep(0.02)  # a user typing the next command; never less than kubectl starts in
    with open(result, "w") as f:
        json.dump({"edits": edits, "busy": busy}, f)


if __name__ == "__main__":
    main()
