"""memory.management: what it must agree on with the layers it may not import."""

from __future__ import annotations

from memproxy.memory.management import TURN_ROLES
from memproxy.outbox.capture import CAPTURED_ROLES


def test_a_queued_turn_keeps_the_roles_capture_keeps_and_the_answer() -> None:
    # POST /v1/memories {messages} and the MCP remember_conversation tool store a turn as a
    # captured chat turn would be stored: the same roles, plus the assistant's reply.
    assert frozenset({"assistant", *CAPTURED_ROLES}) == TURN_ROLES
