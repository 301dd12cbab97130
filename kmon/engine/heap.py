"""Python's garbage collector, set for a long run of refreshes.

Each refresh makes and drops thousands of objects (a row per socket, claims,
events), and the collector's full passes walk every live object: the
libraries' own (Textual, Rich, psutil, ...) and, on a dashboard, its widgets.
At 2,000 connections those passes cost the dashboard about a fifth of its CPU.

A young collection comes once the objects made outnumber the objects freed by
the threshold. A refresh frees nearly all it makes, so the count rises only by
what it keeps (and by cyclic garbage, which the next collection frees): at
10,000, the dashboard at 2,000 connections still ran a young collection about
every refresh (4–5 ms each, 0.4% of a core); at 50,000, none in 30 s. Young
garbage stays bounded by the threshold's 50,000 objects.
"""

from __future__ import annotations

import gc

YOUNG_THRESHOLD = 50_000  # allocations between two young collections (Python's default: 700)


def settle_heap() -> None:
    """Before a loop of refreshes: what start-up made stays out of the collector's passes
    for good, and young objects are collected less often."""
    gc.collect()
    gc.freeze()
    _, middle, old = gc.get_threshold()
    gc.set_threshold(YOUNG_THRESHOLD, middle, old)
