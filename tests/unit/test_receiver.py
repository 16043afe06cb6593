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


def test_a_fence_orders_the_owners_of_one_call_not_calls_between_them():
    """Each call has its own token sequence: a new call's token 1 is not stale against another
    call's token 2 on the same object; a stale owner of the same call is."""
    r = FencedReceiver()
    r.submit(object_id="q:vendor", idempotency_key="a", fence=2, operation="search", execution="call-1")
    r.submit(object_id="q:vendor", idempotency_key="b", fence=1, operation="search", execution="call-2")
    with pytest.raises(StaleFence):
        r.submit(object_id="q:vendor", idempotency_key="a:more", fence=1, operation="search", execution="call-1")
    assert r.highest_fence("q:vendor", "call-1") == 2 and r.highest_fence("q:vendor", "call-2") == 1


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
        reply = client.submit(object_id="o", idempotency_key="k", fence=3, operation="op", sender="w1",
                              execution="c1")
        client.submit(object_id="o", idempotency_key="k3", fence=1, operation="op", execution="c2")  # another call
        assert reply.result["confirmation"] == "receiver-1"
        with pytest.raises(StaleFence):
            client.submit(object_id="o", idempotency_key="k2", fence=2, operation="op", execution="c1")
        assert client.status("k")["confirmation"] == "receiver-1"
        assert client.snapshot()["effects"][0]["sender"] == "w1"
    finally:
        server.stop()
    with pytest.raises(NoAnswer):
        ReceiverClient(server.url, timeout=0.5).submit(object_id="o", idempotency_key="x", fence=9, operation="op")
