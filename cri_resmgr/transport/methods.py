"""The CRI method table: every RPC that protos/ knows, keyed by its gRPC path.

Built once from the generated descriptors, so there is no hand-written entry per
method. The relay uses it to pick a handler shape (unary or server-streaming) and
to decode the few messages a policy intercepts; the dumper uses it to decode what
it dumps. Methods missing from the table are still relayed, as raw bytes.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from types import ModuleType

from google.protobuf import message as _message
from google.protobuf import message_factory

from cri_resmgr._proto import runtime_v1_pb2, runtime_v1alpha2_pb2

Message = _message.Message

# v1alpha2 is wire-identical to v1, so interceptors decode both with v1 classes.
CRI_MODULES: tuple[ModuleType, ...] = (runtime_v1_pb2, runtime_v1alpha2_pb2)
CRI_SERVICES: tuple[str, ...] = ("RuntimeService", "ImageService")


@dataclass(frozen=True)
class Method:
    path: str  # "/runtime.v1.RuntimeService/CreateContainer"
    service: str  # "runtime.v1.RuntimeService"
    name: str  # "CreateContainer"
    version: str  # "v1" or "v1alpha2"
    request: type[Message]
    response: type[Message]
    client_streaming: bool
    server_streaming: bool


def split_path(path: str) -> tuple[str, str]:
    """'/pkg.Service/Method' -> ('pkg.Service', 'Method'); tolerant of junk."""
    service, _, name = path.lstrip("/").rpartition("/")
    return service, name


class MethodTable:
    """Name-keyed lookup of known RPCs."""

    def __init__(self, modules: Iterable[ModuleType] = CRI_MODULES):
        self._by_path: dict[str, Method] = {}
        for module in modules:
            package = module.DESCRIPTOR.package
            version = package.rpartition(".")[2]
            for service in module.DESCRIPTOR.services_by_name.values():
                for m in service.methods:
                    path = f"/{service.full_name}/{m.name}"
                    self._by_path[path] = Method(
                        path=path,
                        service=service.full_name,
                        name=m.name,
                        version=version,
                        request=message_factory.GetMessageClass(m.input_type),
                        response=message_factory.GetMessageClass(m.output_type),
                        client_streaming=m.client_streaming,
                        server_streaming=m.server_streaming,
                    )

    def lookup(self, path: str) -> Method | None:
        return self._by_path.get(path)

    def __iter__(self) -> Iterator[Method]:
        return iter(self._by_path.values())

    def __len__(self) -> int:
        return len(self._by_path)

    def services(self) -> set[str]:
        return {m.service for m in self._by_path.values()}
