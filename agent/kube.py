"""Kubernetes API clients from a kubeconfig file or the in-cluster service account."""

from __future__ import annotations

from kubernetes import client, config


def new_api_client(kubeconfig: str | None) -> client.ApiClient:
    """An ApiClient of its own (the library's global default configuration stays untouched)."""
    if kubeconfig:
        return config.new_client_from_config(config_file=kubeconfig)
    configuration = client.Configuration()
    config.load_incluster_config(client_configuration=configuration)
    return client.ApiClient(configuration)
