"""A workload as the CRI calls kubelet makes: what every source turns into.

A jsonl dump holds them as recorded; a YAML pod list and a generated churn are
turned into the calls kubelet would make for them, with the runtime's replies made
up (ids). The simulator hands each call to the engine's interceptors as the relay
would; replay sends them to a runtime.
"""

from __future__ import annotations

from dataclasses import dataclass

from google.protobuf.message import Message

from cri_resmgr.errors import CriResmgrError

__all__ = ["Call", "WorkloadError", "RUNTIME_SERVICE"]

RUNTIME_SERVICE = "runtime.v1.RuntimeService"


class WorkloadError(CriResmgrError, ValueError):
    """A workload input that cannot be read; the message names the file and where in it."""


@dataclass(frozen=True)
class Call:
    method: str  # short name: "CreateContainer"
    request: Message  # runtime.v1 message
    reply: Message | None  # None: the call failed (code, details) or no reply was recorded
    where: str  # "dump.jsonl:12", "pods.yaml: pod default/web", "churn #41"
    service: str = RUNTIME_SERVICE  # as recorded: "runtime.v1alpha2.RuntimeService"...
    code: str = "OK"  # the gRPC status name of the reply
    details: str = ""
    time: float | None = None  # seconds since the first call of the recording, when known

    @property
    def path(self) -> str:
        return f"/{self.service}/{self.method}"

    @property
    def failed(self) -> bool:
        return self.code != "OK"
