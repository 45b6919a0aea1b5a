"""Rendezvous (highest-random-weight) preference with bounded loads: which live member each
shared-watch slot prefers, computed by every replica alone from the same inputs. Pure
functions; :mod:`._placement` keeps the membership records in Redis.
"""

from __future__ import annotations

import hashlib
from collections.abc import Collection, Iterable, Mapping

__all__ = ["assign", "loads", "preference", "weight"]


# ---------------------------------------------------------------------- preference
def weight(slot: str, member: str) -> int:
    """The rendezvous weight of ``member`` for ``slot``: a 64-bit integer, the same in every
    process and Python version."""
    data = member.encode() + b"\0" + slot.encode()
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "big")


def preference(slot: str, members: Iterable[str]) -> list[str]:
    """The members in ``slot``'s order of preference (highest weight first; ties, which
    take a 64-bit collision, by member id). Pure HRW: the first is the slot's choice when
    loads are not bounded."""
    return sorted(set(members), key=lambda m: (-weight(slot, m), m))


def _slot_order(slot: str) -> bytes:
    return hashlib.blake2b(slot.encode(), digest_size=8).digest()


def assign(
    slots: Iterable[str] | Mapping[str, Collection[str]],
    members: Iterable[str] | None = None,
) -> dict[str, str]:
    """The preferred member of every slot, loads bounded.

    Args:
        slots: The slot keys, with ``members`` the members that may lead any of them; or a
            mapping slot -> the members that may lead it (``members`` then limits them, if
            given). Slots no member may lead are left out of the result.
        members: The live members (ignored duplicates).

    Returns:
        slot -> member. Deterministic: the same inputs give the same answer in every
        replica, in any order. When every member may lead every slot, the number of slots
        per member differs by at most one.
    """
    live = None if members is None else set(members)
    if isinstance(slots, Mapping):
        eligible = {
            s: frozenset(ms) if live is None else frozenset(ms) & live for s, ms in slots.items()
        }
    else:
        everyone = frozenset(live or ())
        eligible = dict.fromkeys(slots, everyone)
    eligible = {s: ms for s, ms in eligible.items() if ms}
    all_members = set().union(*eligible.values()) if eligible else set()
    if not all_members:
        return {}
    base, extra = divmod(len(eligible), len(all_members))
    load = dict.fromkeys(all_members, 0)
    over = 0  # members holding base + 1
    out: dict[str, str] = {}
    for slot in sorted(eligible, key=lambda s: (_slot_order(s), s)):
        order = preference(slot, eligible[slot])
        for m in order:
            n = load[m]
            if n < base or (n == base and over < extra):
                load[m] = n + 1
                over += n == base
                out[slot] = m
                break
        else:  # its members are full (they lead others only they may): the first anyway
            out[slot] = order[0]
            load[order[0]] += 1
    return out


def loads(assignment: Mapping[str, str], members: Iterable[str] = ()) -> dict[str, int]:
    """Slots per member of an :func:`assign` answer (``members`` listed with 0 if absent)."""
    out = dict.fromkeys(members, 0)
    for m in assignment.values():
        out[m] = out.get(m, 0) + 1
    return out


# ---------------------------------------------------------------------- membership
# A key of another type (forged) is replaced, so a forged key cannot stop membership.
# ``since`` starts again when the member was not live (a join, or a rejoin after its record
# expired: a paused or flapping replica): what its age, and so handovers to it, wait for.
# KEYS: members zset, record hash, slot set. ARGV: id, ttl ms, started_at, led, preferred,
# 'set' (replace the slot set with the rest of ARGV) or 'keep'. Returns 1, or 0 when the
# slot set does not exist (Redis restarted, or never sent): the caller sends it again.
