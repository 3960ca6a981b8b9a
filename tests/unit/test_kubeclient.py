"""drain_guard.kube.kubeclient: the agent imports only the parts of kubernetes_asyncio it uses.

Each check runs in a fresh interpreter (the import state of this one is shared with every
other test). They fail when a kubernetes_asyncio release changes what the deferral relies on:
then the agent still works (the packages' own ``__init__`` runs), but the saving is gone.
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

from drain_guard.kube import kubeclient


def _run(code: str) -> Any:
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    return json.loads(out.stdout)


def test_the_agent_loads_no_model_and_only_the_api_classes_it_uses() -> None:
    loaded = _run(
        "import json, sys\n"
        "import drain_guard.cli, drain_guard.node.controller\n"
        "client = vars(sys.modules['kubernetes_asyncio.client'])\n"
        "print(json.dumps({'modules': sorted(m for m in sys.modules\n"
        "    if m.startswith('kubernetes_asyncio.')),\n"
        "    'client_init_ran': '__version__' in client}))\n"
    )
    modules = set(loaded["modules"])
    assert not loaded["client_init_ran"]
    assert not {m for m in modules if m.startswith("kubernetes_asyncio.client.models.")}
    assert {m for m in modules if m.startswith("kubernetes_asyncio.client.api.")} == {
        "kubernetes_asyncio.client.api.apps_v1_api",
        "kubernetes_asyncio.client.api.core_v1_api",
        "kubernetes_asyncio.client.api.custom_objects_api",
        "kubernetes_asyncio.client.api.policy_v1_api",
    }
    # Nor the library's other packages (watch, dynamic, stream, utils).
    assert {m.split(".")[1] for m in modules} == {"client", "config"}


def test_every_name_is_the_librarys_own_and_the_rest_loads_on_demand() -> None:
    """After the deferred import, the packages still give every name a normal import gives,
    and the agent's names are the very objects the library exports."""
    same = _run(
        "import json\n"
        "from drain_guard.kube import kubeclient\n"
        "import kubernetes_asyncio, kubernetes_asyncio.client as client\n"
        "import kubernetes_asyncio.config as config\n"
        "from kubernetes_asyncio.client.models import V1Node\n"
        "names = {n: getattr(kubeclient, n) is getattr(client, n, getattr(config, n, None))\n"
        "         for n in kubeclient.__all__}\n"
        "names['V1Node'] = client.V1Node is V1Node\n"
        "names['version'] = kubernetes_asyncio.__version__ == client.__version__\n"
        "names['WellKnownApi'] = client.api.WellKnownApi is client.WellKnownApi\n"
        "print(json.dumps(names))\n"
    )
    assert same == dict.fromkeys(same, True)
    assert set(same) >= set(kubeclient.__all__)


def test_a_process_that_imported_the_library_first_keeps_it_whole() -> None:
    state = _run(
        "import json, sys\n"
        "import kubernetes_asyncio.client\n"
        "from drain_guard.kube import kubeclient\n"
        "client = sys.modules['kubernetes_asyncio.client']\n"
        "print(json.dumps([kubeclient.CoreV1Api is client.CoreV1Api,\n"
        "                  '__getattr__' not in vars(client)]))\n"
    )
    assert state == [True, True]
