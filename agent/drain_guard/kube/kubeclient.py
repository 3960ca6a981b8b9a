"""The parts of kubernetes_asyncio the agent uses, imported without the rest.

The library's package ``__init__`` files import every generated API class and about 700 model
classes (18 MiB of resident memory as deployed, docs/benchmarks.md); the agent reads raw JSON
and needs four API classes. So, before the first import of the library in the process,
its four package ``__init__`` files are registered without being run, and the modules the
agent uses are imported by their own paths. A package's ``__init__`` still runs, as a normal
import would, the first time anything asks it for a name it does not have yet: nothing the
library or another caller expects can go missing, only the saving. ``tests/unit/
test_kubeclient.py`` fails when that happens, or when a name here is not the library's own.

To remove: delete ``_defer`` and its calls; the imports below stay valid as they are.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import sys
from typing import Any

__all__ = [
    "ApiClient",
    "AppsV1Api",
    "ConfigException",
    "Configuration",
    "CoreV1Api",
    "CustomObjectsApi",
    "PolicyV1Api",
    "load_incluster_config",
    "load_kube_config",
]

#: The packages whose ``__init__`` imports what the agent does not use.
DEFERRED = (
    "kubernetes_asyncio",
    "kubernetes_asyncio.client",
    "kubernetes_asyncio.client.api",
    "kubernetes_asyncio.client.models",
)


def _defer(name: str) -> None:
    """Register package ``name`` with its ``__init__`` not run until a name is missing."""
    parent, _, child = name.rpartition(".")
    path = sys.modules[parent].__path__ if parent else None
    spec = importlib.machinery.PathFinder.find_spec(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"no package {name}")
    module = importlib.util.module_from_spec(spec)
    loader = spec.loader

    def missing(attr: str) -> Any:
        # A submodule (``from package import submodule``) is imported on its own ...
        if importlib.machinery.PathFinder.find_spec(f"{name}.{attr}", module.__path__):
            return importlib.import_module(f"{name}.{attr}")
        # ... anything else runs the package's own __init__, as a normal import would have.
        del vars(module)["__getattr__"]
        loader.exec_module(module)
        return getattr(module, attr)

    vars(module)["__getattr__"] = missing  # consulted for names the module lacks
    sys.modules[name] = module
    if parent:
        setattr(sys.modules[parent], child, module)


if "kubernetes_asyncio" not in sys.modules:
    for _name in DEFERRED:
        _defer(_name)

from kubernetes_asyncio.client.api.apps_v1_api import AppsV1Api  # noqa: E402
from kubernetes_asyncio.client.api.core_v1_api import CoreV1Api  # noqa: E402
from kubernetes_asyncio.client.api.custom_objects_api import CustomObjectsApi  # noqa: E402
from kubernetes_asyncio.client.api.policy_v1_api import PolicyV1Api  # noqa: E402
from kubernetes_asyncio.client.api_client import ApiClient  # noqa: E402
from kubernetes_asyncio.client.configuration import Configuration  # noqa: E402

# The library's config modules import these two from the package itself.
_client = vars(sys.modules["kubernetes_asyncio.client"])
_client.update(ApiClient=ApiClient, Configuration=Configuration)

from kubernetes_asyncio.config.config_exception import ConfigException  # noqa: E402
from kubernetes_asyncio.config.incluster_config import load_incluster_config  # noqa: E402
from kubernetes_asyncio.config.kube_config import load_kube_config  # noqa: E402
