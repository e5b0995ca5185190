"""Per-client request rates: a sliding one-minute window per key (or per address).

The window lives in the server process: with ``--workers N`` each process counts its own
requests, so a client may reach N times its limit (the README says so).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable

WINDOW_S = 60.0


class RateLimiter:
    """``allow(client, per_minute)`` is None when the request may go on, else the seconds
    until it may be retried."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._seen: dict[str, deque[float]] = {}
        self._last_sweep = clock()

    def allow(self, client: str, per_minute: int) -> float | None:
        now = self._clock()
        self._sweep(now)
        times = self._seen.setdefault(client, deque())
        while times and times[0] <= now - WINDOW_S:
            times.popleft()
        if len(times) >= per_minute:
            return max(0.0, times[0] + WINDOW_S - now)
        times.append(now)
        return None

    def _sweep(self, now: float) -> None:
        """Forget clients idle for a whole window (the table stays as small as the traffic)."""
        if now - self._last_sweep < WINDOW_S:
            return
        self._last_sweep = now
        for client in [c for c, t in self._seen.items() if not t or t[-1] <= now - WINDOW_S]:
            del self._seen[client]
