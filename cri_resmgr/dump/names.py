"""Human names for the pod and container ids that CRI calls carry.

Most CRI requests name their target only by id.  The dump writer learns
id -> name from the replies it decodes anyway (RunPodSandbox, CreateContainer,
List*, *Status, Stream*) so a dump line can say "default/nginx" or
"nginx:app" instead of a 64-digit hash.  Best effort: an id never seen is shown
shortened, like crictl does.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, TypeVar

from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import Message

if TYPE_CHECKING:
    # A message's DESCRIPTOR in the C implementation (what protobuf uses here): the
    # same attributes as the pure-Python classes, a different type.
    from google._upb._message import Descriptor as UpbDescriptor
    from google._upb._message import FieldDescriptor as UpbFieldDescriptor

    MessageType = Descriptor | UpbDescriptor
    Field = FieldDescriptor | UpbFieldDescriptor

V = TypeVar("V")

SHORT_ID = 13  # crictl's truncation
POD_NAME_LABEL = "io.kubernetes.pod.name"
POD_NAMESPACE_LABEL = "io.kubernetes.pod.namespace"

# Message types (by short name, identical in v1 and v1alpha2) that describe a pod or
# a container together with its id.
_POD_TYPES = frozenset({"PodSandbox", "PodSandboxStatus", "PodSandboxAttributes"})
_CONTAINER_TYPES = frozenset({"Container", "ContainerStatus", "ContainerAttributes"})


# Methods whose replies (with their requests) teach the book something; the writer
# decodes these replies even when it dumps only names.
LEARNING_METHODS = frozenset({
    "RunPodSandbox", "CreateContainer", "RemovePodSandbox", "RemoveContainer",
    "ListPodSandbox", "ListContainers", "PodSandboxStatus", "ContainerStatus",
    "StreamPodSandboxes", "StreamContainers", "GetContainerEvents",
    "ListContainerStats", "StreamContainerStats", "ListPodSandboxStats", "StreamPodSandboxStats",
    "ContainerStats", "PodSandboxStats",
})
# Methods whose decoded request must be kept until the reply arrives.
REQUEST_KEEPING_METHODS = frozenset({"RunPodSandbox", "CreateContainer", "RemovePodSandbox", "RemoveContainer"})


def short_id(cid: str) -> str:
    return cid[:SHORT_ID]


class NameBook:
    """Bounded id -> name maps; the oldest entries go first when full."""

    def __init__(self, capacity: int = 16384) -> None:
        self._capacity = capacity
        self._pods: dict[str, tuple[str, str]] = {}  # id -> (namespace, name)
        self._containers: dict[str, str] = {}  # id -> "pod:container"
        # message type -> the fields worth descending into
        self._walk_cache: dict[MessageType, tuple[Field, ...]] = {}

    # -- answers -------------------------------------------------------------

    def pod(self, pod_id: str) -> str:
        known = self._pods.get(pod_id)
        if known is None:
            return short_id(pod_id)
        namespace, name = known
        return f"{namespace}/{name}" if namespace else name

    def pod_name(self, pod_id: str) -> str | None:
        known = self._pods.get(pod_id)
        return known[1] if known else None

    def container(self, container_id: str) -> str:
        return self._containers.get(container_id) or short_id(container_id)

    # -- learning ------------------------------------------------------------

    def add_pod(self, pod_id: str, namespace: str, name: str) -> None:
        if pod_id and name:
            _put(self._pods, pod_id, (namespace, name), self._capacity)

    def add_container(self, container_id: str, label: str) -> None:
        if container_id and label:
            _put(self._containers, container_id, label, self._capacity)

    def forget(self, some_id: str) -> None:
        self._pods.pop(some_id, None)
        self._containers.pop(some_id, None)

    def learn(self, message: Message) -> None:
        """Record every pod/container (with id and metadata) found in a reply."""
        type_name = message.DESCRIPTOR.name
        if type_name in _POD_TYPES:
            self._learn_pod(message)
        elif type_name in _CONTAINER_TYPES:
            self._learn_container(message)
        for fd in self._paths_to_names(message.DESCRIPTOR):
            if fd.is_repeated:
                for item in getattr(message, fd.name):
                    self.learn(item)
            elif message.HasField(fd.name):
                self.learn(getattr(message, fd.name))

    def _paths_to_names(self, descriptor: MessageType,
                        visiting: frozenset[MessageType] = frozenset()) -> tuple[Field, ...]:
        """The message fields of a type that can lead to a pod or container, cached
        per type: walking every field of large List replies would be wasted work."""
        fields = self._walk_cache.get(descriptor)
        if fields is None:
            found = []
            for fd in descriptor.fields:
                sub = fd.message_type
                if sub is None or sub.GetOptions().map_entry or sub in visiting:
                    continue
                if sub.name in _POD_TYPES or sub.name in _CONTAINER_TYPES or \
                        self._paths_to_names(sub, visiting | {descriptor}):
                    found.append(fd)
            fields = tuple(found)
            if not visiting:  # results computed under a recursion cut-off may be partial
                self._walk_cache[descriptor] = fields
        return fields

    def _learn_pod(self, pod: Message) -> None:
        self.add_pod(_text(pod, "id"), *_metadata(pod))

    def _learn_container(self, ctr: Message) -> None:
        pod = None
        pod_id = _text(ctr, "pod_sandbox_id")  # only some container types carry it
        if pod_id:
            pod = self.pod_name(pod_id)
        pod = pod or _labels(ctr).get(POD_NAME_LABEL) or (short_id(pod_id) if pod_id else "")
        _, name = _metadata(ctr)
        self.add_container(_text(ctr, "id"), f"{pod}:{name}" if pod else name)


def _put(table: dict[str, V], key: str, value: V, capacity: int) -> None:
    table.pop(key, None)
    if len(table) >= capacity:
        del table[next(iter(table))]
    table[key] = value


def _cri(message: Message) -> bool:
    """A CRI message; NRI's (dumped by the NRI plugin) share method and type names with CRI's."""
    return message.DESCRIPTOR.full_name.startswith("runtime.")


def _nri_qualifier(request: Message) -> str:
    """'ns/pod' or 'ns/pod:container' of an NRI request (its `pod` and `container` fields)."""
    fields = request.DESCRIPTOR.fields_by_name
    pod = _field(request, "pod") if "pod" in fields else None
    ctr = _field(request, "container") if "container" in fields else None
    where = f"{_text(pod, 'namespace')}/{_text(pod, 'name')}" if pod is not None and _text(pod, "name") else ""
    name = _text(ctr, "name") if ctr is not None else ""
    return f"{where}:{name}" if where and name else where or name


def request_qualifier(method_name: str, request: Message, names: NameBook) -> str:
    """What a request is about: 'ns/pod', 'pod:container', an image, or ''."""
    if not _cri(request):
        return _nri_qualifier(request)
    if method_name == "RunPodSandbox":
        namespace, name = _metadata(request, "config")
        return f"{namespace}/{name}" if namespace else name
    if method_name == "CreateContainer":
        return f"{_metadata(request, 'sandbox_config')[1]}:{_metadata(request, 'config')[1]}"
    if container_id := _text(request, "container_id"):
        return names.container(container_id)
    if pod_id := _text(request, "pod_sandbox_id"):
        return names.pod(pod_id)
    if "image" in request.DESCRIPTOR.fields_by_name and request.HasField("image"):
        return _text(_field(request, "image"), "image")
    return ""


def learn_from_call(method_name: str, request: Message | None, reply: Message, names: NameBook) -> None:
    """Update names from a successful reply (and its request, when decoded)."""
    if not _cri(reply):
        return
    if method_name == "RunPodSandbox" and request is not None:
        names.add_pod(_text(reply, "pod_sandbox_id"), *_metadata(request, "config"))
    elif method_name == "CreateContainer" and request is not None:
        pod_namespace, pod_name = _metadata(request, "sandbox_config")
        names.add_pod(_text(request, "pod_sandbox_id"), pod_namespace, pod_name)
        names.add_container(_text(reply, "container_id"), f"{pod_name}:{_metadata(request, 'config')[1]}")
    elif method_name in ("RemoveContainer", "RemovePodSandbox") and request is not None:
        names.forget(_text(request, "container_id" if method_name == "RemoveContainer" else "pod_sandbox_id"))
    else:
        names.learn(reply)


# The book reads v1 and v1alpha2 messages alike, by field name: these give the
# fields it reads their types, checked where they are read.


def _text(message: Message, name: str) -> str:
    """A string field; '' when the message type has no such field."""
    value = getattr(message, name, "")
    return value if isinstance(value, str) else ""


def _field(message: Message, name: str) -> Message:
    """A sub-message field (the default instance when unset)."""
    value = getattr(message, name)
    if not isinstance(value, Message):
        raise TypeError(f"{message.DESCRIPTOR.full_name}.{name} is not a message")
    return value


def _metadata(message: Message, *path: str) -> tuple[str, str]:
    """(namespace, name) of the `metadata` of message, or of its sub-message at `path`."""
    for name in path:
        message = _field(message, name)
    meta = _field(message, "metadata")
    return _text(meta, "namespace"), _text(meta, "name")


def _labels(message: Message) -> Mapping[str, str]:
    value = getattr(message, "labels", None)
    return value if isinstance(value, Mapping) else {}
