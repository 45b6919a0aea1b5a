"""Where the Redis engine's slots should be led: the session's side of placement (issue 22).

A :class:`Placer` runs in the session's task group. Every ``lease_ttl / 3`` it renews this
replica's :class:`~kubemux.share._placement.Membership` (with the digests of the slots it
may lead), reads the live members and computes every slot's preferred member with
:func:`~kubemux.share._placement.assign`. Slots ask it :meth:`Placer.choice`:

- ``"mine"``: this replica is the slot's preferred leader: it takes a free lease at once;
- ``"other"``: another live member is: this replica takes a free lease only after
  :attr:`Placer.grace` (the preferred one polls every ``acquire_period`` and takes it
  first unless it is absent or slow);
- ``"none"``: no live member is (placement off, nobody else may lead it, or the view is
  older than a lease): first come, first served, as without placement.

It also hands slots over: a slot this replica leads whose preferred member is another,
healthy one (renewed on time, seen in two views in a row) and that it has led for at least
:attr:`Placer.hold` is handed over (:meth:`SlotState.request_handover`), at most
:attr:`Placer.pace` slots per period. Placement decides who *tries first*, never who may
write: the lease and fencing are unchanged, so a wrong view costs balance, not safety.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Mapping

import anyio

from ._placement import Member, Membership, assign, eligibility
from ._redis_slot import SlotState

log = logging.getLogger(__name__)

__all__ = ["Placer"]


class Placer:
    """One session's membership and its view of who should lead which slot."""

    def __init__(
        self,
        membership: Membership | None,
        slots: Callable[[], Mapping[str, SlotState]],
        *,
        lease_ttl: float,
        acquire_period: float,
        errors: tuple[type[BaseException], ...],
    ) -> None:
        self.membership = membership  # None: this session is not in the hash (relay)
        self._slots = slots
        self.ttl = lease_ttl
        self.period = lease_ttl / 3
        # a healthy preferred member polls every acquire_period: two polls, at most a period
        self.grace = min(max(2 * acquire_period, 0.1), self.period)
        self.hold = lease_ttl  # a slot is led this long before it is handed over
        self.settle = lease_ttl  # a member is live this long (no gap) before it is handed one
        self._errors = errors
        self.preferred: dict[str, str] = {}  # slot digest -> member id
        self.members: tuple[Member, ...] = ()
        self._seen_twice: set[str] = set()  # ids in this view and the one before
        self._last_ids: set[str] = set()
        self.view_at = -math.inf  # monotonic time of the last view
        self.handovers = 0  # slots handed over (the new leader took them), ever
        self.pace = 1
        self._wake = anyio.Event()  # a slot started: publish it soon
        self._cycled = anyio.Event()  # set after every cycle (then replaced)
        self._published: frozenset[str] = frozenset()  # digests in the record last sent
        self._failing = False

    @property
    def member_id(self) -> str | None:
        m = self.membership
        return None if m is None or not m.joined else m.id

    def choice(self, digest: str) -> str:
        """``"mine"``, ``"other"`` or ``"none"`` (see the module)."""
        if time.monotonic() - self.view_at > self.ttl:
            return "none"  # no fresh view: as without placement
        who = self.preferred.get(digest)
        if who is None:
            return "none"
        return "mine" if who == self.member_id else "other"

    def counts(self) -> tuple[int, int]:
        """(slots this replica leads, slots it is preferred for)."""
        me = self.member_id
        slots = self._slots()
        led = sum(1 for s in slots.values() if s.role == "leader")
        preferred = 0 if me is None else sum(1 for d in slots if self.preferred.get(d) == me)
        return led, preferred

    def handed(self) -> None:
        """A slot of this replica was taken over by its preferred member."""
        self.handovers += 1

    def refresh_soon(self) -> None:
        """A slot has no leader: read the members now, not at the next period (a dead
        member's slots are re-preferred as soon as its record expires)."""
        self._wake.set()

    async def published(self, digest: str) -> None:
        """Until this replica's record names ``digest`` (it may then be preferred for it)
        and a view was read after that; bounded by two periods (Redis down: go on)."""
        if self.membership is None:
            return
        self._wake.set()
        with anyio.move_on_after(2 * self.period):
            while digest not in self._published:
                await self._cycled.wait()

    async def run(self) -> None:
        """Renew, read, hand over, every period until cancelled (then leave, bounded)."""
        membership = self.membership
        try:
            while True:
                try:
                    await self._cycle()
                    if self._failing:
                        log.info("placement: Redis answers again")
                    self._failing = False
                except self._errors as exc:
                    if not self._failing:  # once per outage, not every period
                        log.warning("placement: %s: %s", type(exc).__name__, exc)
                    self._failing = True
                cycled, self._cycled = self._cycled, anyio.Event()
                cycled.set()
                with anyio.move_on_after(self.period):
                    await self._wake.wait()
                    await anyio.sleep(0.05)  # the other slots of a generation start too
                self._wake = anyio.Event()
        finally:
            if membership is not None and membership.joined:
                with anyio.move_on_after(1.0, shield=True):
                    try:
                        await membership.leave()
                    except self._errors:
                        pass  # it expires by itself

    async def _cycle(self) -> None:
        membership = self.membership
        slots = self._slots()
        if membership is not None:
            mine = [d for d, s in slots.items() if s.can_lead and s.shared]
            membership.set_slots(mine)
            led, preferred = self.counts()
            membership.report(led=led, preferred=preferred)
            if mine or membership.joined:
                await membership.join()  # renews (and sends the slot set when it moved)
                self._published = frozenset(mine)
            members = await membership.members()
        else:
            members = await self._read_only_members()
        live = {m.id for m in members}
        self.members = members
        self.preferred = assign(eligibility(members), live)
        self._seen_twice = live & self._last_ids
        self._last_ids = live
        self.view_at = time.monotonic()
        self._hand_over(slots, members)

    async def _read_only_members(self) -> tuple[Member, ...]:
        return ()  # a session outside the hash has no membership to read with

    def _hand_over(self, slots: Mapping[str, SlotState], members: tuple[Member, ...]) -> None:
        me = self.member_id
        if me is None:
            return
        # handed only to a member renewed on time, live without a gap for the settle time
        # (a paused or flapping replica's age starts again), seen in two views in a row
        healthy = {
            m.id for m in members if m.expires_in > self.ttl / 3 and m.age >= self.settle
        } & self._seen_twice
        now = time.monotonic()
        due = [
            s
            for d, s in sorted(slots.items())
            if s.role == "leader"
            and s.lead_synced
            and s.token is not None
            and not s.handing_over
            and now - s.led_since >= self.hold
            and self.preferred.get(d, me) != me
            and self.preferred[d] in healthy
        ]
        # paced: a quarter of what this replica leads per period (at least one), so a join
        # moves its share within a few periods without every watch restarting at once
        led = sum(1 for s in slots.values() if s.role == "leader")
        self.pace = max(1, -(-led // 4))
        for s in due[: self.pace]:
            log.info(
                "placement: handing slot %s over to member %s", s.k_lease, self.preferred[s.digest]
            )
            s.request_handover(self.preferred[s.digest])
