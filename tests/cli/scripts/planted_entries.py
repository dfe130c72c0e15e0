"""planted_entries.py - what the scripts read from Redis is outside input:
ready entries and slot records that do not decode, ids that break the id
rule, numbers out of range, taken by a plain take (part 1 of 4, with
planted_acked.py, planted_leases.py and planted_stored.py; the cases and
helpers are in tests/lib/planted.py).

The checks, the same for every part, are told in tests/lib/planted.py.
"""
# tier: slow (about 27 s): make test runs it, make test-fast does not
import os
import sys

sys.path.insert(0, os.environ.get("DQ_TEST_LIB", os.path.join(os.path.dirname(__file__), "..", "..", "lib")))
from dqtest import *  # noqa: E402,F403
from planted import *  # noqa: E402,F403

pinger = watch()

# ------------------------------------------------------------------ ready entries and slot records

plant_entries("take")

# ------------------------------------------------------------------ Redis never blocked

unblocked(pinger)
finish()
