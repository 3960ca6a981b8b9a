"""The cluster's actors: MCO's controllers and daemon, the kubelet, the garbage collector.

They act only through the Kubernetes API (kubernetes_asyncio), as the real ones do, so they run
against the simulator or a real API server alike; they import nothing from the API server."""
