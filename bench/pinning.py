"""bench/pinning.py - where the Python benchmark phases run their processes.

With 2 cores or more and taskset, servers go to core 0 (the topology
helpers start them through topology.SERVER_PREFIX) and clients to core 1,
as bench/run.sh pins dqbench. Elsewhere, or with DQ_BENCH_UNPINNED=1 (the
processes placed as users' are), nothing is pinned.
"""
import os
import shutil

import topology

PINNED = ((os.cpu_count() or 1) >= 2 and shutil.which("taskset") is not None
          and os.environ.get("DQ_BENCH_UNPINNED", "") != "1")
CLIENT = ["taskset", "-c", "1"] if PINNED else []
if PINNED:
    topology.SERVER_PREFIX = ["taskset", "-c", "0"]
