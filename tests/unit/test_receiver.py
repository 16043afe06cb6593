"""The fenced receiver: the highest token per object wins; idempotency keys replay."""

from __future__ import annotations

import pytest

from console.worker.receiver import FencedReceiver, NoAnswer, ReceiverClient, ReceiverServer, StaleFence


def test_lower_token_is_rejected_and_changes_nothing():
    r = FencedReceiver()
    r.submit(object_id="inv-7", idempotency_key="a", fence=42, operation="capture")
    with pytest.raises(StaleFence) as info:
        r.submit(object_id="inv-7", idempotency_key="b", fence=41, operation="capture")
    assert info.value.highest == 42
    assert len(r.effects) == 1 and len(r.rejections) == 1
    r.submit(object_id="other", idempotency_key="c", fence=1, operation="capture")  # per object


def test_same_key_returns_first_result_without_second_effect():
    r = FencedReceiver()
    first = r.submit(object_id="o", idempotency_key="k", fence=1, operation="create", body={"n": 1})
    again = r.submit(object_id="o", idempotency_key="k", fence=2, operation="create", body={"n": 2})
    assert again.replayed and again.result == first.result and len(r.effects) == 1


def test_status_only_for_verifiable_and_fences_old_owner():
    assert FencedReceiver(verifiable=True).status("nope") is None
    with pytest.raises(NotImplementedError):
        FencedReceiver(verifiable=False).status("k")
    r = FencedReceiver()
    r.submit(object_id="o", idempotency_key="k", fence=1, operation="update")
    assert r.status("k", fence=2) is not None
    with pytest.raises(StaleFence):
        r.submit(object_id="o", idempotency_key="k2", fence=1, operation="update")


def test_over_http():
    server = ReceiverServer(FencedReceiver(verifiable=True)).start()
    try:
        client = ReceiverClient(server.url)
        reply = client.submit(object_id="o", idempotency_key="k", fence=3, operation="op", sender="w1")
        assert reply.result["confirmation"] == "receiver-1"
        with pytest.raises(StaleFence):
            client.submit(object_id="o", idempotency_key="k2", fence=2, operation="op")
        assert client.status("k")["confirmation"] == "receiver-1"
        assert client.snapshot()["effects"][0]["sender"] == "w1"
    finally:
        server.stop()
    with pytest.raises(NoAnswer):
        ReceiverClient(server.url, timeout=0.5).submit(object_id="o", idempotency_key="x", fence=9, operation="op")
