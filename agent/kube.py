"""Kubernetes API clients from a kubeconfig file or the in-cluster service account, and
the raw body of a call made with `_preload_content=False`."""

from __future__ import annotations

import urllib3
from kubernetes import client, config


def new_api_client(kubeconfig: str | None) -> client.ApiClient:
    """An ApiClient of its own (the library's global default configuration stays untouched)."""
    if kubeconfig:
        api: client.ApiClient = config.new_client_from_config(config_file=kubeconfig)
        return api
    configuration = client.Configuration()
    config.load_incluster_config(client_configuration=configuration)
    return client.ApiClient(configuration)


def body(response: object) -> bytes:
    """The bytes the API server sent. With `_preload_content=False` the client hands back
    urllib3's response unparsed (its annotations name the model it would have made), so
    the agent reads the JSON itself, unknown fields and all."""
    if not isinstance(response, urllib3.BaseHTTPResponse):
        raise TypeError(f"expected the API server's raw response, got {type(response).__name__}")
    return response.data
