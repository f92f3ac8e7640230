"""Pooled sessions that restores from a backup tier are imported into.

A restore takes a session from the pool and overwrites it (``truncate(0)`` then import); it never
creates a session per restore. Every path -- success (the cache forks the state and gives the
session back), failure and cancellation -- returns the session with :meth:`RestorePool.give`.
"""

from __future__ import annotations

from kvgate.core.runtime import ModelRuntime, Session


class RestorePool:
    def __init__(self, runtime: ModelRuntime, capacity: int):
        self.runtime, self.capacity = runtime, capacity
        self.free: list[Session] = []
        self.lent: dict[int, Session] = {}
        self.created = 0
        self.overflow = 0

    def take(self) -> Session:
        """A pooled empty session; past ``capacity`` concurrent restores, an unpooled one (counted)."""
        if self.free:
            session = self.free.pop()
        elif self.created < self.capacity:
            session = self.runtime.new_session()
            self.created += 1
        else:
            self.overflow += 1
            return self.runtime.new_session()
        self.lent[session.id] = session
        return session

    def owns(self, session: Session) -> bool:
        return self.lent.get(session.id) is session

    def give(self, session: Session) -> None:
        """Take a session back: its blocks are released now, the session object is reused."""
        if not self.owns(session):
            self.runtime.release(session)
            return
        del self.lent[session.id]
        self.runtime.truncate(session, 0)
        self.free.append(session)

    def stats(self) -> dict[str, int]:
        return {"capacity": self.capacity, "created": self.created, "free": len(self.free),
                "lent": len(self.lent), "overflow": self.overflow}
