"""What every measured script shares: the process's peak memory so far, and how a script hands its numbers back
to the test (tests/reliability/support.py: `measured()` reads the last `RESULT` line)."""

from __future__ import annotations

import json
import resource
from typing import Any

RESULT_PREFIX = "RESULT "


def peak_kib() -> int:
    """The process's peak resident set so far (VmHWM), in KiB."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def done(**numbers: Any) -> None:
    """Print the script's result as the last line of its output."""
    print(RESULT_PREFIX + json.dumps(numbers))
