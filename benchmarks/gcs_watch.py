"""Watch a Ray cluster's node table and timestamp each change of the alive-node count.

    python gcs_watch.py GCS_ADDRESS N OUT_FILE [TIMEOUT_S]

Used by the verl-example baseline, which has no readiness check of its own: the job
counts as ready when its sleep loop is over AND this watcher has seen all N nodes alive.
It asks the GCS the way sf's barrier does (ray._raylet.GcsClient.get_all_node_info, one
cheap RPC), every 0.1 s, so the baseline is not charged for a slow check. Writes
"<epoch> <alive count>" lines to OUT_FILE; exits 0 once N nodes are alive, 3 on timeout.
"""

from __future__ import annotations

import sys
import time


def alive_count(client) -> int:
    info = client.get_all_node_info(timeout=5)
    return sum(1 for node in info.values() if getattr(node, "state", 0) == 0)


def main(argv: list[str]) -> int:
    address, want, out = argv[0], int(argv[1]), argv[2]
    timeout = float(argv[3]) if len(argv) > 3 else 300.0
    from ray._raylet import GcsClient

    deadline = time.monotonic() + timeout
    client, last = None, -1
    with open(out, "a", buffering=1) as handle:
        while time.monotonic() < deadline:
            try:
                if client is None:
                    client = GcsClient(address=address)
                count = alive_count(client)
            except Exception:  # GCS not up yet
                count = 0
            if count != last:
                handle.write(f"{time.time():.3f} {count}\n")
                last = count
            if count >= want:
                return 0
            time.sleep(0.1)
    return 3


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
