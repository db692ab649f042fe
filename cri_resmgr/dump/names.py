"""Human names for the pod and container ids that CRI calls carry.

Most CRI requests name their target only by id.  The dump writer learns
id -> name from the replies it decodes anyway (RunPodSandbox, CreateContainer,
List*, *Status, Stream*) so a dump line can say "default/nginx" or
"nginx:app" instead of a 64-digit hash.  Best effort: an id never seen is shown
shortened, like crictl does.
"""

from __future__ import annotations

from google.protobuf.message import Message

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
        self._walk_cache: dict = {}  # message descriptor -> fields worth descending into

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

    def _paths_to_names(self, descriptor, visiting: frozenset = frozenset()) -> tuple:
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
        meta = pod.metadata
        self.add_pod(pod.id, meta.namespace, meta.name)

    def _learn_container(self, ctr: Message) -> None:
        labels = ctr.labels
        pod = None
        pod_id = getattr(ctr, "pod_sandbox_id", "")
        if pod_id:
            pod = self.pod_name(pod_id)
        pod = pod or labels.get(POD_NAME_LABEL) or (short_id(pod_id) if pod_id else "")
        name = ctr.metadata.name
        self.add_container(ctr.id, f"{pod}:{name}" if pod else name)


def _put(table: dict, key: str, value, capacity: int) -> None:
    table.pop(key, None)
    if len(table) >= capacity:
        del table[next(iter(table))]
    table[key] = value


def request_qualifier(method_name: str, request: Message, names: NameBook) -> str:
    """What a request is about: 'ns/pod', 'pod:container', an image, or ''."""
    fields = request.DESCRIPTOR.fields_by_name
    if method_name == "RunPodSandbox":
        meta = request.config.metadata
        return f"{meta.namespace}/{meta.name}" if meta.namespace else meta.name
    if method_name == "CreateContainer":
        return f"{request.sandbox_config.metadata.name}:{request.config.metadata.name}"
    if "container_id" in fields and request.container_id:
        return names.container(request.container_id)
    if "pod_sandbox_id" in fields and request.pod_sandbox_id:
        return names.pod(request.pod_sandbox_id)
    if "image" in fields and request.HasField("image"):
        return request.image.image
    return ""


def learn_from_call(method_name: str, request: Message | None, reply: Message, names: NameBook) -> None:
    """Update names from a successful reply (and its request, when decoded)."""
    if method_name == "RunPodSandbox" and request is not None:
        meta = request.config.metadata
        names.add_pod(reply.pod_sandbox_id, meta.namespace, meta.name)
    elif method_name == "CreateContainer" and request is not None:
        pod_meta = request.sandbox_config.metadata
        names.add_pod(request.pod_sandbox_id, pod_meta.namespace, pod_meta.name)
        names.add_container(reply.container_id, f"{pod_meta.name}:{request.config.metadata.name}")
    elif method_name in ("RemoveContainer", "RemovePodSandbox") and request is not None:
        names.forget(request.container_id if method_name == "RemoveContainer" else request.pod_sandbox_id)
    else:
        names.learn(reply)
