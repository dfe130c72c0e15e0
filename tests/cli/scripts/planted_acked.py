"""planted_acked.py - planted_entries.py's cases taken with a lease, each
delivery acked (take --ack manual + ack): what the scripts read from Redis
is outside input (part 2 of 4, with planted_entries.py, planted_leases.py
and planted_stored.py; helpers in tests/lib/planted.py).

The checks, the same for every part, are told in tests/lib/planted.py.
"""
# tier: slow (about 28 s): make test runs it, make test-fast does not
import os
import sys

sys.path.insert(0, os.environ.get("DQ_TEST_LIB", os.path.join(os.path.dirname(__file__), "..", "..", "lib")))
from dqtest import *  # noqa: E402,F403
from planted import *  # noqa: E402,F403

pinger = watch()

# ------------------------------------------------------------------ ready entries and slot records, acked

plant_entries("manual")

# ------------------------------------------------------------------ Redis never blocked

unblocked(pinger)
finish()
