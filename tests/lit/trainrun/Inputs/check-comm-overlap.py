#!/usr/bin/env python3
"""check-comm-overlap.py TRACE GROUP: prints the trace's otherData.comm_overlap entry for GROUP
and whether its async collectives overlapped compute kernels; exits 1 when the group has no
entry."""
import json
import sys

trace, group = sys.argv[1], sys.argv[2]
summary = json.load(open(trace)).get("otherData", {}).get("comm_overlap", {})
if group not in summary:
    print(f"no collectives of group '{group}' in {trace} (groups: {sorted(summary)})")
    sys.exit(1)
s = summary[group]
print(f"{group}: {s['collectives']} collectives, {s['async']} async, "
      f"{s['async_overlapping']} of them overlapped compute")
print("overlapped" if s["async_overlapping"] > 0 else "not overlapped")
