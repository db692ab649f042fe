"""Stopping: idle kept-alive connections are closed at once, a review in
flight is answered before the server lets go."""
from __future__ import annotations

import threading

from cri_resmgr_webhook.server import ServerConfig


def test_drain_closes_idle_connections(start_webhook, support):
    # Idle connections outlive the grace unless the drain closes them.
    webhook = start_webhook(ServerConfig(idle_timeout=600))
    conn = webhook.connect()
    webhook.review(support.admission_review(support.pod()), conn=conn)
    assert webhook.server.connections.count() == 1
    webhook.server.shutdown()
    assert webhook.server.drain(grace=5) is True
    assert webhook.server.connections.count() == 0
    conn.close()


def test_drain_waits_for_review_in_flight(start_webhook, support):
    entered, release = threading.Event(), threading.Event()

    def slow(pod):
        entered.set()
        release.wait(30)
        return [{"op": "add", "path": "/metadata/annotations", "value": {"slow": "yes"}}]

    webhook = start_webhook(ServerConfig(patch_pod=slow))
    replies: list[dict] = []
    client = threading.Thread(target=lambda: replies.append(webhook.review(support.admission_review(support.pod()))))
    client.start()
    assert entered.wait(30)

    drained: list[bool] = []
    webhook.server.shutdown()
    drainer = threading.Thread(target=lambda: drained.append(webhook.server.drain(grace=30)))
    drainer.start()
    drainer.join(0.3)
    assert drained == []  # still waiting for the review
    release.set()
    client.join(30)
    drainer.join(30)
    assert drained == [True]
    assert replies[0]["response"]["allowed"] is True
    ops = support.decode_patch(replies[0])
    assert ops[0]["value"] == {"slow": "yes"}
