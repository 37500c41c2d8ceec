"""The one reader of a JSON result a job-side process prints as a line of its output (the
barrier's and the health check's result, the capability probe's `SF_CAPABILITIES {...}`).
Stdlib only."""

from __future__ import annotations

import json


def last_object(text: str, marker: str = "") -> dict | None:
    """The JSON on the last line of `text` that starts with `marker` (after it), or with `{` when
    there is no marker; None when there is no such line or it is not JSON. Lines after it are
    skipped: a container runtime may log after the step's command ended (runc's "unable to get
    oom kill count" in a rootless container)."""
    for line in reversed(text.strip().splitlines()):
        if line.startswith(marker or "{"):
            try:
                return json.loads(line[len(marker):])
            except ValueError:
                return None
    return None
