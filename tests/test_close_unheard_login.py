"""A client's close right after its SASL request, the broker's answer not captured: once the
process's brokers are known the wire keeps requests only (kmon.sources.packets.kafka_wire),
so a failed login the client closed on at once looks like a plain client close. The close
is unsettled, never ``client_closed`` (seen so in the ground-truth harness's
sasl-wrong-password scenario, 1 close of 44: not reproducible on demand with a real broker,
hence the WireClose made here)."""

from __future__ import annotations

from kmon.engine.closes import wire_reason
from kmon.model import WireClose
from kmon.sources.kafka_protocol import SASL_APIS

SASL_AUTHENTICATE = 36
METADATA = 3


def test_a_client_close_after_an_unheard_login_is_unsettled_not_a_client_close():
    assert SASL_AUTHENTICATE in SASL_APIS
    unheard = WireClose("client", reset=False, last_api=SASL_AUTHENTICATE, answers_heard=False)
    assert wire_reason(unheard, "client_closed") == "unknown"
    heard = WireClose("client", reset=False, last_api=SASL_AUTHENTICATE)  # no error answered
    assert wire_reason(heard, "client_closed") == "client_closed"
    failed = WireClose("client", reset=False, last_api=SASL_AUTHENTICATE, auth_failed=True,
                       answers_heard=False)
    assert wire_reason(failed, "client_closed") == "auth_failed"
    after_login = WireClose("client", reset=False, last_api=METADATA, answers_heard=False)
    assert wire_reason(after_login, "client_closed") == "client_closed"
