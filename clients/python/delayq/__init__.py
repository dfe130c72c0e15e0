"""delayq for Python: a client that speaks delayq's protocol (PROTOCOL.md at
the top of the repository) to Redis directly, on redis-py (Debian's
python3-redis).

Client offers, takes (waiting on the queue's wake list as the C library
does), acks, nacks, extends, cancels and looks items up; Scheduler moves
items whose due time came to the ready list, so a deployment of Python
processes alone needs no C process. Both speak to one Redis server (no
Cluster or Sentinel), and to unsharded queues only: a call on a sharded
queue raises ShardedQueueError and changes nothing.
"""
from .client import (QUEUE_SETTING, Client, DelayqError, Item, Lookup, Message, Nacked,
                     NoLibraryError, Offered, ShardedQueueError)
from .scheduler import Scheduler

__all__ = ["Client", "Item", "Offered", "Message", "Nacked", "Lookup", "Scheduler",
           "DelayqError", "NoLibraryError", "ShardedQueueError", "QUEUE_SETTING"]
