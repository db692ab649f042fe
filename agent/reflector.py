"""List-then-watch of one kind of object, surviving watch expiry and API outages.

The consumer sees a full replacement after every (re)list and single events in
between. A watch that ends normally is resumed from the last version seen; a
410 Gone means that version is no longer available, so the objects are listed
again. Any other failure is retried with backoff, while the consumer keeps what
it last saw: an outage changes nothing downstream.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from typing import Any, Protocol

from kubernetes import watch
from kubernetes.client.exceptions import ApiException

from cri_resmgr_agent.backoff import Backoff

log = logging.getLogger(__name__)

Obj = dict[str, Any]


class Consumer(Protocol):
    def replace(self, objects: list[Obj]) -> None: ...

    def upsert(self, obj: Obj) -> None: ...

    def delete(self, obj: Obj) -> None: ...


# Returns the objects and the version to watch from.
ListFunc = Callable[[], tuple[list[Obj], str]]
# Starts a watch stream on `watcher` from a version: watcher.stream(api_func, resource_version=..., ...).
# A watch's events as the client's stream yields them: "type", "object", "raw_object".
WatchEvent = dict[str, Any]
WatchFunc = Callable[[watch.Watch, str], Iterator[WatchEvent]]


class Reflector:
    def __init__(self, what: str, list_func: ListFunc, watch_func: WatchFunc, consumer: Consumer,
                 backoff: Backoff, stop: threading.Event) -> None:
        self._what = what
        self._list = list_func
        self._watch_func = watch_func
        self._consumer = consumer
        self._backoff = backoff
        self._stop = stop
        self._lock = threading.Lock()
        self._watcher: watch.Watch | None = None
        self._failing = False
        # Diagnostics (and tests): how many times the objects were listed, and watches expired.
        self.relists = 0
        self.expirations = 0

    @property
    def version(self) -> str | None:
        """The resourceVersion the next watch starts from."""
        return getattr(self, "_version", None)

    @property
    def failing(self) -> bool:
        """Is the API server failing this reflector right now?"""
        return self._failing

    def interrupt(self) -> None:
        """Cuts the open watch so that run() notices `stop` at once."""
        with self._lock:
            if self._watcher is not None:
                self._watcher.stop()

    def run(self) -> None:
        # None: list first. "": watch from the current state.
        self._version: str | None = None
        listed: str | None = None
        while not self._stop.is_set():
            try:
                if self._version is None:
                    objects, self._version = self._list()
                    listed = self._version
                    self.relists += 1
                    self._consumer.replace(objects)
                    self._recovered()
                self._watch()
            except ApiException as exc:
                if exc.status == 410:
                    self.expirations += 1
                    if self._version == listed and listed != "":
                        # The listed version is already too old (an object read with get
                        # carries its own, possibly old, version): watch from "now", which
                        # starts with the current objects as ADDED events.
                        log.info("%s: listed version %s expired; watching from the current state",
                                 self._what, listed)
                        self._version = listed = ""
                    else:
                        log.info("%s: watch version expired (%s); listing again", self._what, exc.reason)
                        self._version = None
                    continue
                self._failed(f"API error {exc.status}: {exc.reason}")
            except Exception as exc:  # connection refused, reset, timeouts: all mean "try again later"
                if self._stop.is_set():
                    break
                self._failed(f"{type(exc).__name__}: {exc}")

    def _watch(self) -> None:
        """Streams events from self._version on, advancing it with every event (bookmarks too)."""
        watcher = watch.Watch()
        with self._lock:
            self._watcher = watcher
        if self._stop.is_set():
            return
        try:
            for event in self._watch_func(watcher, self._version or ""):
                kind, obj = event["type"], event["raw_object"]
                self._version = (obj.get("metadata") or {}).get("resourceVersion") or self._version
                if kind in ("ADDED", "MODIFIED"):
                    self._consumer.upsert(obj)
                elif kind == "DELETED":
                    self._consumer.delete(obj)
                self._recovered()
        finally:
            with self._lock:
                self._watcher = None

    def _recovered(self) -> None:
        self._backoff.reset()
        if self._failing:
            log.info("%s: API server reachable again", self._what)
            self._failing = False

    def _failed(self, why: str) -> None:
        # The first failure of an outage is a warning; the retries are not news.
        if not self._failing:
            log.warning("%s: %s; retrying with backoff, keeping the last state", self._what, why)
            self._failing = True
        else:
            log.debug("%s: still failing: %s", self._what, why)
        self._backoff.wait(self._stop)
