"""Topologies: whom a node sends to, the tree's k-ary heap layout, where a worker re-attaches.

Layout (k = ``tree_fanout``): the coordinator is the root; workers 0..k-1 are its children and
worker i's children are k(i+1) .. k(i+1)+k-1, so worker i's parent is ``i // k - 1`` (-1: the
coordinator). Every worker has one parent edge: n edges, depth about log_k(n).

When a worker dies, each of its live children re-attaches to its nearest live ancestor
(:func:`live_parent`; the coordinator at worst), computed by everyone from the layout and the
set of dead workers, so both ends of every new edge agree without a coordinator round-trip.
"""

from __future__ import annotations

from collections.abc import Iterable

COORDINATOR = -1   # the root of the tree, as a parent index


def parent(worker: int, k: int) -> int:
    """Worker ``worker``'s parent: a worker id, or -1 for the coordinator."""
    return worker // k - 1


def children(node: int, k: int, n: int) -> list[int]:
    """The children of ``node`` (a worker id, or -1 for the coordinator) among n workers."""
    first = k * (node + 1)
    return list(range(first, min(first + k, n)))


def depth(worker: int, k: int) -> int:
    """Edges between the coordinator and ``worker`` (1 for the coordinator's children)."""
    d = 1
    while (worker := parent(worker, k)) >= 0:
        d += 1
    return d


def height(n: int, k: int) -> int:
    """The depth of the deepest of n workers (0 without workers)."""
    return depth(n - 1, k) if n > 0 else 0


def live_parent(worker: int, k: int, dead: Iterable[int]) -> int:
    """The nearest ancestor of ``worker`` not in ``dead`` (-1: the coordinator)."""
    gone = set(dead)
    p = parent(worker, k)
    while p >= 0 and p in gone:
        p = parent(p, k)
    return p


def live_children(node: int, k: int, n: int, dead: Iterable[int]) -> list[int]:
    """The nearest descendants of ``node`` not in ``dead``: its children, a dead child
    replaced by its own live children (recursively), ascending."""
    gone = set(dead)
    found: list[int] = []
    todo = children(node, k, n)
    while todo:
        c = todo.pop()
        if c in gone:
            todo.extend(children(c, k, n))
        else:
            found.append(c)
    return sorted(found)


def ancestors(worker: int, k: int) -> list[int]:
    """The workers between ``worker`` and the coordinator, nearest first."""
    found = []
    while (worker := parent(worker, k)) >= 0:
        found.append(worker)
    return found


def between(a: int, b: int, k: int) -> list[int] | None:
    """The workers strictly between ``a`` and ``b`` on their heap path (-1 is the
    coordinator, everyone's ancestor) if one is an ancestor of the other; else None."""
    up_a, up_b = [*ancestors(a, k), -1] if a >= 0 else [], [*ancestors(b, k), -1] if b >= 0 else []
    if b in up_a:
        return up_a[:up_a.index(b)]
    if a in up_b:
        return up_b[:up_b.index(a)]
    return None


def same_side(me: int, a: int, b: int, k: int) -> bool:
    """Whether ``a`` and ``b`` (workers, or -1 for the coordinator) lie on the same side of
    ``me``: through its parent (both above it), or through one child (on one path below it).
    What came from one side is owed to the others only."""
    if a == b:
        return True
    up = [*ancestors(me, k), -1] if me >= 0 else []
    if a in up or b in up:
        return a in up and b in up
    return between(a, b, k) is not None and between(me, a, k) is not None


def neighbours(node: int, workers: int, topology: str, fanout: int) -> list[int]:
    """Whom ``node`` (a worker, or COORDINATOR) sends to directly in a run of ``workers``."""
    if topology == "mesh":
        if node == COORDINATOR:
            return []
        return [p for p in range(workers) if p != node] + [COORDINATOR]
    if topology == "star":
        return list(range(workers)) if node == COORDINATOR else [COORDINATOR]
    down = children(node, fanout, workers)
    return down if node == COORDINATOR else [parent(node, fanout), *down]
