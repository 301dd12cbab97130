"""Where each captured TCP stream's next Kafka frame starts, so that only a segment at a
frame boundary counts as a request or response header.

A Kafka frame is a 4-byte size and that many bytes; the next frame starts right
after it. Per stream (source and destination address and port), ``follows``
keeps the sequence number where the next frame is due, learnt from the last
frame header it accepted. A segment counts as a frame start only when its
sequence number is that boundary or up to ``WINDOW`` bytes past it (frames the
capture did not see whole: two requests in one segment, a full ring). A segment
inside the last frame (the body of a large Produce, whose bytes a client may
choose) or far from the stream's bytes (a segment spoofed with a guessed
sequence number) is refused, as is one whose size no frame has. A stream's SYN
(``start``) starts its chain at its first byte: a client that reuses a 4-tuple opens a
new stream, its sequence numbers nowhere near the old one's. Else the first segment
kmon sees of a stream starts its chain. A stream whose chain is lost
for good (every segment refused for ``RESYNC_AFTER_S`` and at least
``RESYNC_AFTER`` segments) starts again at its latest segment. At most
``MAX_STREAMS`` streams are followed, the least recently used dropped first.
"""

from __future__ import annotations

from kmon.sources import bounded

MASK = 0xFFFFFFFF  # sequence numbers wrap at 32 bits
WINDOW = 8 << 20  # bytes past the boundary a frame may start (a large TCP receive window)
RESYNC_AFTER = 64  # refused segments in a row before a stream's chain starts again ...
RESYNC_AFTER_S = 5  # ... over at least this many seconds
MAX_STREAMS = 16384
MAX_FRAME = 1 << 30  # a larger size is no frame's (a body's bytes): never a boundary


class FrameBoundaries:
    """The next frame boundary of every stream kmon captures (see the module's docstring)."""

    def __init__(self) -> None:
        # stream (raw addresses and ports) -> [next boundary, refused in a row, first refused at]
        self.streams: dict[bytes, list[int]] = {}

    def start(self, stream: bytes, syn_seq: int) -> None:
        """``stream`` (re)starts with a SYN at ``syn_seq``: its first frame is due at the
        next byte."""
        bounded.put(self.streams, stream, [(syn_seq + 1) & MASK, 0, 0], MAX_STREAMS)

    def follows(self, stream: bytes, seq: int, size: int, now_s: int) -> bool:
        """True when the segment at ``seq`` of ``stream``, whose first 4 bytes read as a
        frame of ``size`` bytes, starts at a frame boundary (it then moves the boundary past
        that frame); ``now_s`` is its capture time in seconds."""
        if size > MAX_FRAME:
            return False
        end = (seq + 4 + size) & MASK
        state = self.streams.get(stream)
        if state is None:
            bounded.put(self.streams, stream, [end, 0, 0], MAX_STREAMS)
            return True
        if (seq - state[0]) & MASK < WINDOW:
            state[0], state[1] = end, 0
            self.streams[stream] = self.streams.pop(stream)  # the most recently used
            return True
        if state[1] == 0:
            state[2] = now_s
        state[1] += 1
        if state[1] >= RESYNC_AFTER and now_s - state[2] >= RESYNC_AFTER_S:
            bounded.put(self.streams, stream, [end, 0, 0], MAX_STREAMS)
            return True
        return False
