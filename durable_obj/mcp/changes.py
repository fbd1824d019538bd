"""A memory server tells its clients when the memory changed.

A server that serves a memory read-only (another process holds the write
lease: `--if-held read-only`, or `--read-only`) follows it (`follow=`): its
view moves as the writer commits, and each move is announced as
`notifications/resources/updated` for the resource `MEMORY_URI` to every
client listening for it. In mcp 2.3 that is `subscriptions/listen`
(protocol 2026-07-28, SEP-2575): the server publishes a `ResourceUpdated`
on its `SubscriptionBus`, and each open listen stream that asked for the
URI delivers it. The 2025-era `resources/subscribe` is not served:
`MCPServer` registers no handler for it (only the low-level `Server`
takes one), and a 2025-era client asking gets "method not found".

The follower's `on_change` runs on a heartbeat worker thread, and a bus's
listeners must run on the server's event loop: `Announcer` runs the bus's
`publish` on the loop that opened the listen streams.
A writer server announces nothing (its own tools answer what they changed).
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from mcp.server.subscriptions import InMemorySubscriptionBus, ResourceUpdated, ServerEvent

if TYPE_CHECKING:
    from durable_obj.core.object import DurableObject

log = logging.getLogger("durable_obj")

#: The resource a memory server serves and announces: the memory's state.
MEMORY_URI = "durable-obj://memory"


class Announcer(InMemorySubscriptionBus):
    """A subscription bus that is also a follower's `on_change`: called from
    any thread, it delivers `ResourceUpdated(MEMORY_URI)` on the event loop
    of the streams listening."""

    def __init__(self) -> None:
        super().__init__()
        self._loops: set[asyncio.AbstractEventLoop] = set()
        self._guard = threading.Lock()
        #: Updates announced so far (for a test or a log line).
        self.announced = 0

    def subscribe(self, listener: Callable[[ServerEvent], None]) -> Callable[[], None]:
        with self._guard:  # called by a listen stream, on the server's loop
            self._loops.add(asyncio.get_running_loop())
        return super().subscribe(listener)

    def __call__(self, update: Any) -> None:
        """A follower's on_change (`durable_obj.core.follow.Update`)."""
        event = ResourceUpdated(uri=MEMORY_URI)
        with self._guard:
            loops = [loop for loop in self._loops if not loop.is_closed()]
            self._loops = set(loops)
        # counted before it is sent: a listener that got the event finds it counted
        self.announced += 1
        for loop in loops:
            try:  # the bus's own publish, run on that loop; nobody waits for it
                asyncio.run_coroutine_threadsafe(self.publish(event), loop)
            except RuntimeError:  # the loop closed meanwhile: nobody listens there
                continue
        log.info("memory server: %s moved to seq %s; announced", update.url, update.seq)


def memory_state(obj: DurableObject) -> str:
    """The resource's text: which memory this is, and how current."""
    return json.dumps(
        {
            "url": obj.url,
            "seq": obj.seq,
            "read_only": obj.read_only,
            "following": obj.following,
        }
    )
